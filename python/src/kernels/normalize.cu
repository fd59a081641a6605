// The loader's one GPU kernel: a batch of NHWC uint8 images to NCHW float32, each channel
// c as x * scale[c] + shift[c], that is (x / 255 - mean[c]) / std[c].
//
// Built to PTX by `make ptx` with clang alone (no CUDA toolkit); the module embeds
// normalize.ptx and the driver compiles it for whatever GPU it finds (sm_52 PTX runs on every
// later architecture). Regenerate the PTX whenever this file changes.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

extern "C" __attribute__((global)) void nhwc_u8_to_nchw_f32(const u8 *in, float *out, u32 plane, u32 images,
                                                            float scale0, float scale1, float scale2,
                                                            float shift0, float shift1, float shift2) {
    u64 pixels = (u64)plane * images;
    u64 stride = (u64)__nvvm_read_ptx_sreg_nctaid_x() * __nvvm_read_ptx_sreg_ntid_x();
    for (u64 p = (u64)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x();
         p < pixels; p += stride) {
        u64 n = p / plane;
        u64 i = p - n * plane;
        const u8 *px = in + 3 * p;
        float *o = out + 3 * n * plane + i;
        o[0] = px[0] * scale0 + shift0;
        o[plane] = px[1] * scale1 + shift1;
        o[2 * (u64)plane] = px[2] * scale2 + shift2;
    }
}
