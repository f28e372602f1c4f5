#!/usr/bin/env python3
"""Block files or SQLite for the store's persisted chunks: the measurement behind the choice.

Reads every block file of a gpuwatch data dir (docs/format/block.md), writes the same chunks
(and the same series index) into a fresh SQLite database the way an SQLite-backed store would
(a series table, a chunks table with one BLOB per chunk and an index on (series, kind, time)),
and reports bytes on disk and the time to write and to read everything back, beside the block
files' own numbers. Python stdlib only.

    bench/store/sqlite_vs_blocks.py DATA_DIR [--page-size N]
"""
import argparse
import os
import sqlite3
import struct
import sys
import tempfile
import time
import zlib


def varint(b, pos):
    out = shift = 0
    while True:
        c = b[pos]
        pos += 1
        out |= (c & 0x7F) << shift
        if not c & 0x80:
            return out, pos
        shift += 7


def svarint(b, pos):
    v, pos = varint(b, pos)
    return (v >> 1) ^ -(v & 1), pos


def read_block(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"GWBLOCK1" or data[-8:] != b"GWBLKEND":
        raise ValueError(f"{path}: not a block file")
    index_off, index_len, crc = struct.unpack_from("<QQI", data, len(data) - 32)
    index = data[index_off:index_off + index_len]
    if zlib.crc32(index) != crc:
        raise ValueError(f"{path}: index CRC mismatch")
    pos = 0
    _, pos = varint(index, pos)  # version
    _, pos = varint(index, pos)  # seq
    block_min, pos = svarint(index, pos)
    _, pos = svarint(index, pos)
    _, pos = varint(index, pos)
    n, pos = varint(index, pos)
    for _ in range(n):
        _, pos = varint(index, pos)
    n, pos = varint(index, pos)
    symbols = []
    for _ in range(n):
        ln, pos = varint(index, pos)
        symbols.append(index[pos:pos + ln].decode())
        pos += ln
    n, pos = varint(index, pos)
    series = []
    for _ in range(n):
        nl, pos = varint(index, pos)
        labels = []
        for _ in range(nl):
            a, pos = varint(index, pos)
            b, pos = varint(index, pos)
            labels.append((symbols[a], symbols[b]))
        nc, pos = varint(index, pos)
        chunks = []
        for _ in range(nc):
            kind = index[pos]
            pos += 1
            dmin, pos = svarint(index, pos)
            span, pos = varint(index, pos)
            ns, pos = varint(index, pos)
            off, pos = varint(index, pos)
            ln, pos = varint(index, pos)
            mint = block_min + dmin
            chunks.append((kind, mint, mint + span, ns, data[off:off + ln]))
        series.append((labels, chunks))
    return series, len(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir")
    ap.add_argument("--page-size", type=int, default=4096)
    args = ap.parse_args()
    bdir = os.path.join(args.data_dir, "blocks")
    files = sorted(f for f in os.listdir(bdir) if f.endswith(".gwb"))
    if not files:
        sys.exit(f"no block files in {bdir}")
    t0 = time.perf_counter()
    blocks = [read_block(os.path.join(bdir, f)) for f in files]
    read_blocks_s = time.perf_counter() - t0
    block_bytes = sum(size for _, size in blocks)
    chunks = sum(len(c) for series, _ in blocks for _, c in series)
    raw_samples = sum(ns for series, _ in blocks for _, c in series for k, _, _, ns, _ in c if k == 0)

    with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
        db_path = os.path.join(tmp, "store.sqlite")
        t0 = time.perf_counter()
        db = sqlite3.connect(db_path)
        db.execute(f"PRAGMA page_size={args.page_size}")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE series(id INTEGER PRIMARY KEY, labels TEXT UNIQUE)")
        db.execute("CREATE TABLE chunks(series INTEGER, kind INTEGER, min_t INTEGER, max_t INTEGER,"
                   " samples INTEGER, data BLOB)")
        db.execute("CREATE INDEX chunks_by_series ON chunks(series, kind, min_t)")
        ids = {}
        for series, _ in blocks:
            for labels, cs in series:
                key = ",".join(f"{k}={v}" for k, v in labels)
                sid = ids.get(key)
                if sid is None:
                    sid = ids[key] = len(ids) + 1
                    db.execute("INSERT INTO series VALUES (?, ?)", (sid, key))
                db.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?)",
                               [(sid, k, a, b, ns, d) for k, a, b, ns, d in cs])
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        write_s = time.perf_counter() - t0
        sqlite_bytes = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp))
        t0 = time.perf_counter()
        db = sqlite3.connect(db_path)
        n = sum(len(row[0]) for row in db.execute("SELECT data FROM chunks"))
        db.close()
        read_s = time.perf_counter() - t0

    print(f"{len(files)} block files, {chunks} chunks, {raw_samples} raw samples")
    print(f"| layout | bytes on disk | bytes/raw sample | write all | read all |")
    print(f"|---|---|---|---|---|")
    print(f"| gpuwatch block files | {block_bytes} | {block_bytes / raw_samples:.4f} | "
          f"(see the store) | {read_blocks_s:.2f} s (Python parse) |")
    print(f"| SQLite {sqlite3.sqlite_version}, page {args.page_size} | {sqlite_bytes} | "
          f"{sqlite_bytes / raw_samples:.4f} | {write_s:.2f} s | {read_s:.2f} s ({n} bytes) |")
    print(f"SQLite / blocks: {sqlite_bytes / block_bytes:.3f}x")


if __name__ == "__main__":
    main()
