"""smaps_rollup, smaps mapping and fdinfo parsing (the same parsers serve devices and hosts)."""

from harness.protocol.memory import parse_fdinfo, parse_mappings, parse_rollup, read_self

SMAPS = """7f0000000000-7f0000100000 r--p 00000000 08:01 123 /data/cache.bin
Size:               1024 kB
Rss:                 512 kB
Private_Clean:       512 kB
7f0000100000-7f0000200000 r--p 00100000 08:01 123 /data/cache.bin
Size:               1024 kB
Rss:                 256 kB
Private_Clean:       256 kB
7f0000200000-7f0000300000 rw-p 00000000 00:00 0
Rss:                 100 kB
"""


def test_rollup():
    text = "00400000-ffffffffff600000 ---p 00000000 00:00 0 [rollup]\nRss: 1000 kB\nAnonymous: 20 kB\n"
    assert parse_rollup(text) == {"Rss": 1000, "Anonymous": 20}


def test_mappings_are_summed_per_path():
    got = parse_mappings(SMAPS, ["/data/cache.bin", "/other"])
    assert got["/data/cache.bin"] == {"Size": 2048, "Rss": 768, "Private_Clean": 768}
    assert got["/other"] == {}


def test_dmabuf_fdinfo():
    infos = ["pos:\t0\nflags:\t02\nsize:\t4096\nexp_name:\tqcom,system\n", "pos:\t0\nflags:\t02\n"]
    assert parse_fdinfo(infos) == {"count": 1, "bytes": 4096}


def test_read_self_reads_this_process():
    mem = read_self([])
    assert mem["rollup"]["Rss"] > 0 and "dmabuf" in mem
