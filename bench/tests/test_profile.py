"""prepfs_bench.profile's parts that need no perf or mount: the categories of stacks, and the
jobs' blocked time against what the cores did meanwhile."""

from __future__ import annotations

import unittest

from prepfs_bench import profile

K = "[kernel.kallsyms]"
APP = "/usr/bin/prepfs"


class CategorizeTest(unittest.TestCase):
    """Stacks innermost first, as `perf script` prints them."""

    def test_the_innermost_frame_that_names_work_decides(self):
        decode = [("decode_mcu_fast", "/usr/lib/libturbojpeg.so"), ("prepfs_pixels::jpeg::decode_with", APP)]
        self.assertEqual(profile.categorize(decode), "JPEG decode")
        resize = [("fast_image_resize::convolution::u8x3::avx2::horiz_convolution_four_rows", APP),
                  ("prepfs_pixels::pipeline::resample_into", APP)]
        self.assertEqual(profile.categorize(resize), "resize/resample")
        png = [("fdeflate::decompress::Decompressor::read_compressed", APP), ("png::decoder::stream::StreamingDecoder::update", APP),
               ("<alloc::boxed::Box<T> as image::io::decoder::ImageDecoder>::read_image", APP)]
        self.assertEqual(profile.categorize(png), "JPEG decode")
        copy = [("__memmove_avx_unaligned_erms", "/lib/libc.so.6"), ("<image::codecs::png::PngDecoder<R>>::read_image", APP)]
        self.assertEqual(profile.categorize(copy), "output encoding and copies")
        malloc = [("_int_malloc", "/lib/libc.so.6"), ("prepfs_pixels::jpeg::decode_with", APP)]
        self.assertEqual(profile.categorize(malloc), "allocation")

    def test_a_kernel_stack_goes_by_what_it_is_there_for(self):
        futex = [("finish_task_switch.isra.0", K), ("futex_wait", K), ("__x64_sys_futex", K), ("syscall", "/lib/libc.so.6")]
        self.assertEqual(profile.categorize(futex), "locks and waiting")
        fuse = [("finish_task_switch.isra.0", K), ("fuse_dev_do_read", K), ("ksys_read", K), ("fuser::channel::Channel::receive", APP)]
        self.assertEqual(profile.categorize(fuse), "FUSE request handling")
        output = [("copy_folio_from_iter_atomic", K), ("shmem_file_write_iter", K), ("vfs_write", K),
                  ("prepfs_pixels::served::tmpfs::file_holding", APP)]
        self.assertEqual(profile.categorize(output), "output encoding and copies")
        source = [("_copy_to_iter", K), ("filemap_read", K), ("__x64_sys_pread64", K), ("prepfs_source::fill", APP)]
        self.assertEqual(profile.categorize(source), "page cache / kernel")

    def test_a_page_fault_of_fresh_memory_is_the_allocators(self):
        fault = [("clear_page_erms", K), ("asm_exc_page_fault", K)]
        self.assertEqual(profile.categorize(fault + [("__memset_avx2", "/lib/libc.so.6"), ("__libc_calloc", "/lib/libc.so.6")]),
                         "allocation")
        self.assertEqual(profile.categorize(fault + [("prepfs_core::fs::open", APP)]), "page faults")
        self.assertEqual(profile.categorize([("prepfs_core::stats::render", APP)]), "other")


class WaitsTest(unittest.TestCase):
    def test_the_samples_in_a_jobs_blocked_intervals_count_by_who_ran_and_the_rest_is_idle(self):
        trace = {"pid": 10, "opens": [[0.0, 1.0]], "reads": [[1.0, 1.5], [3.0, 4.0]], "cpu_s": 0.5,
                 "schedstat": [500_000_000, 200_000_000, 9]}
        machine = [{"time": t, "pid": p} for t, p in [(0.5, 99), (0.6, 99), (1.2, 11), (2.0, 99), (3.5, 7)]]
        (w,) = profile.waits([trace], machine, 99, 1)
        self.assertEqual((w["open_s"], w["read_s"], w["blocked_s"], w["runnable_s"]), (1.0, 1.5, 2.5, 0.2))
        d = w["during_blocked_core_s"]
        self.assertEqual((d["daemon"], d["other"]), (2, 2))  # 2.0 falls between the intervals
        self.assertNotIn("this job", d)
        self.assertAlmostEqual(d["idle"], 2.5 * len(profile.os.sched_getaffinity(0)) - 4)


if __name__ == "__main__":
    unittest.main()
