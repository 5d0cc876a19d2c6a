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


def test_read_self_sums_a_watched_file_mapping(tmp_path):
    """The watched-path reading (smaps) goes through the same file reader as the rollup."""
    import mmap

    path = tmp_path / "watched.bin"
    path.write_bytes(b"x" * (64 << 10))
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        assert mapped[:1] == b"x"
        mem = read_self([str(path)])
    assert mem["mappings"][str(path)]["Size"] == 64 and mem["mappings"][str(path)]["Rss"] > 0


def test_the_python_fork_server_collapses_only_nearly_resident_anonymous_ranges():
    """harness/runner/python_fork_server.py collapses its heap and arenas into huge pages before
    forking (a child's per-step smaps_rollup reading then walks fewer entries): ranges with at
    least 7/8 of their pages resident, never a sparse one (that would add zeroed memory), with
    the data kept and the mapping's flags unchanged (no `hg`: later faults stay 4 kB)."""
    import ctypes
    import mmap
    from pathlib import Path

    import pytest

    from harness.runner.python_fork_server import collapse_to_huge_pages, huge_page_size

    huge = huge_page_size()
    enabled = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not huge or not enabled.exists() or "[never]" in enabled.read_text():
        pytest.skip("no transparent huge pages on this kernel")
    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, 4 * huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf.madvise(mmap.MADV_DONTFORK)  # a flag of its own: never merged with a neighbour
    view = ctypes.c_char.from_buffer(buf)
    try:
        start = ctypes.addressof(view)
        first = -(-start // huge) * huge - start  # offset of the first aligned range
        for offset in range(first, first + 2 * huge, page):  # two ranges, all resident
            buf[offset] = offset // page % 251
        buf[first + 2 * huge] = 7  # the third aligned range: one page resident
        done = collapse_to_huge_pages([(start, start + 4 * huge)])
        if done == 0:
            pytest.skip("the kernel collapsed nothing here (before Linux 6.1, or no huge page)")
        assert done == 2 * huge // 1024
        assert all(buf[o] == o // page % 251 for o in range(first, first + 2 * huge, page))
        assert buf[first + 2 * huge] == 7
        smaps = Path("/proc/self/smaps").read_text().split("\n")
        at = next(i for i, line in enumerate(smaps) if line.startswith(f"{start:x}-"))
        fields = {}
        for line in smaps[at + 1:]:
            if "-" in line.split(":")[0] and " " in line:  # the next mapping's header
                break
            name, _, value = line.partition(":")
            fields[name] = value.strip()
        assert fields["AnonHugePages"] == f"{2 * huge // 1024} kB"
        assert fields["Rss"] == f"{(2 * huge + page) // 1024} kB"  # the sparse range not filled
        assert "hg" not in fields["VmFlags"].split()
    finally:
        del view
        buf.close()
