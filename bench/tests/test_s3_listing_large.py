"""prepfs_bench.s3_listing_large's stand-in S3 server: its ListObjectsV2 pagination gives every
key once and in order, its ranged GETs and HEADs answer as S3's do."""

from __future__ import annotations

import http.client
import re
import unittest
import urllib.parse

from prepfs_bench import s3_listing_large as large


def list_all(port, prefix="data/", max_keys=None, start_after=None):
    """Every key the server lists under PREFIX, following its continuation tokens, and the
    number of pages."""
    keys, token, pages = [], None, 0
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while True:
        q = {"list-type": "2", "prefix": prefix}
        if max_keys:
            q["max-keys"] = str(max_keys)
        if token:
            q["continuation-token"] = token
        if start_after and not token:
            q["start-after"] = start_after
        c.request("GET", "/train?" + urllib.parse.urlencode(q))
        r = c.getresponse()
        body = r.read().decode()
        assert r.status == 200, body
        pages += 1
        page = re.findall(r"<Key>(.*?)</Key>", body)
        count = int(re.search(r"<KeyCount>(\d+)</KeyCount>", body).group(1))
        assert count == len(page), (count, len(page))
        keys += page
        truncated = re.search(r"<IsTruncated>(\w+)</IsTruncated>", body).group(1) == "true"
        m = re.search(r"<NextContinuationToken>(.*?)</NextContinuationToken>", body)
        assert truncated == bool(m), body[:300]
        if not truncated:
            return keys, pages
        token = m.group(1)


class StandInTest(unittest.TestCase):
    def setUp(self):
        self.keys = [large.key_of(i) for i in range(2_345)] + ["other/x.bin", "data0/beside.bin"]
        self.server = large.start_server(large.StandIn(self.keys))
        self.port = self.server.server_address[1]

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()

    def test_pagination_returns_every_key_under_the_prefix_once_and_in_order(self):
        want = sorted(k for k in self.keys if k.startswith("data/"))
        keys, pages = list_all(self.port)
        self.assertEqual(keys, want)
        self.assertEqual(pages, 3, "1,000 keys a page")
        keys, pages = list_all(self.port, max_keys=7)
        self.assertEqual(keys, want)
        self.assertEqual(pages, -(-len(want) // 7))
        keys, _ = list_all(self.port, max_keys=5000)
        self.assertEqual(keys, want, "max-keys is capped at 1,000, the listing still whole")
        keys, _ = list_all(self.port, start_after=want[1500])
        self.assertEqual(keys, want[1501:])
        keys, _ = list_all(self.port, prefix="data/c0001/")
        self.assertEqual(keys, want[1000:2000])
        self.assertEqual(list_all(self.port, prefix="nothing/")[0], [])

    def test_the_server_times_each_page_it_answers(self):
        self.server.store.take_stats()
        _, pages = list_all(self.port)
        stats = self.server.store.take_stats()
        self.assertEqual(stats["pages"], pages)
        self.assertGreater(stats["total_s"], 0)
        self.assertEqual(self.server.store.take_stats()["pages"], 0, "taken once")

    def test_objects_answer_head_and_ranged_get_with_their_etag(self):
        key = large.key_of(42)
        body = large.body_of(key)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("HEAD", "/train/" + key)
        r = c.getresponse()
        r.read()
        self.assertEqual((r.status, r.getheader("Content-Length"), r.getheader("ETag")),
                         (200, str(len(body)), large.etag_of(body)))
        c.request("GET", "/train/" + key, headers={"Range": "bytes=10-19", "If-Match": large.etag_of(body)})
        r = c.getresponse()
        self.assertEqual((r.status, r.read(), r.getheader("Content-Range")), (206, body[10:20], f"bytes 10-19/{len(body)}"))
        c.request("GET", "/train/" + key, headers={"If-Match": '"other"'})
        r = c.getresponse()
        r.read()
        self.assertEqual(r.status, 412)
        c.request("GET", "/train/data/nope.bin")
        r = c.getresponse()
        r.read()
        self.assertEqual(r.status, 404)


if __name__ == "__main__":
    unittest.main()
