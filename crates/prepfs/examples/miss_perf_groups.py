#!/usr/bin/env python3
"""Groups `perf report --no-children --sort symbol --stdio` of examples/miss_profile into the
stages of a cold miss (issue 12), each as a share of the samples and as ms per miss.

Usage: perf report -i perf.data --no-children --sort symbol --stdio 2>/dev/null \
           | python3 crates/prepfs/examples/miss_perf_groups.py MS_PER_MISS
"""
import re
import sys

GROUPS = [
    ("entropy decode (Huffman, incl. progressive)", r"decode_mcu|jpeg_fill_bit_buffer|consume_data|decompress_onepass|decompress_data|jpeg_huff|process_data|start_pass_huff|finish_pass_huff|jpeg_skip|read_and_discard|jdhuff|jdphuff"),
    ("IDCT", r"idct"),
    ("upsampling (chroma)", r"upsample|upsampl"),
    ("colour conversion (YCbCr/CMYK to RGB)", r"ycc|rgb_convert|cmyk|gray_rgb|color_convert|null_convert|ycck"),
    ("other libjpeg (headers, markers, setup)", r"^jpeg_|^jinit|^tj3|^_tj|read_markers|get_sos|get_sof|next_marker|jdiv_round|jzero_far|jcopy|alloc_sarray|alloc_small|alloc_large|realize_virt|access_virt|start_input_pass|prepare_range|master_selection|jsimd_can|init_simd|fill_input_buffer|skip_input"),
    ("resize (fast_image_resize)", r"fast_image_resize"),
    ("mirror / pipeline glue (prepfs)", r"^prepfs(_core)?::|miss_profile::"),
    ("memset / memcpy", r"memset|memmove|memcpy"),
    ("malloc / free", r"malloc|_int_free|free$|cfree|calloc|realloc|unlink_chunk|malloc_consolidate|sysmalloc|brk|mmap|munmap"),
    ("kernel (page faults, clearing pages, other)", r"^\[k\]"),
    ("non-JPEG decode (PNG: image, png, fdeflate)", r"png|fdeflate|image::|crc32|adler"),
]

def main():
    ms = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    shares = {name: 0.0 for name, _ in GROUPS}
    other = 0.0
    others = []
    for line in sys.stdin:
        m = re.match(r"\s+([0-9.]+)%\s+\[(.)\]\s+(.*?)\s{2,}", line)
        if not m:
            continue
        pct, kind, sym = float(m.group(1)), m.group(2), m.group(3).strip()
        key = "[k] " + sym if kind == "k" else sym
        for name, pat in GROUPS:
            if re.search(pat, key):
                shares[name] += pct
                break
        else:
            other += pct
            others.append((pct, sym))
    print(f"| {'stage':<45} | share | ms/miss |")
    print(f"| {'-' * 45} | ----: | ------: |")
    for name, _ in GROUPS:
        print(f"| {name:<45} | {shares[name]:4.1f}% | {shares[name] * ms / 100:.3f} |")
    print(f"| {'other':<45} | {other:4.1f}% | {other * ms / 100:.3f} |")
    others.sort(reverse=True)
    print("other, largest:", ", ".join(f"{s} {p:.2f}%" for p, s in others[:8]), file=sys.stderr)

main()
