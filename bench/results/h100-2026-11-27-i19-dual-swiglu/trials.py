#!/usr/bin/env python3
"""Summarises a ktune cache's trial log (tune.sh's $OUT/data.mdb): per group (node mask) the
trial count and best four, then for the wgmma schedules of the listed groups the time by raster.
usage: trials.py DATA.mdb [GROUP ...]   (needs the lmdb and msgpack Python packages)"""
import collections, sys
import lmdb, msgpack

env = lmdb.open(sys.argv[1], subdir=False, readonly=True, max_dbs=16, lock=False)
db = env.open_db(b'trials')
rows = []
with env.begin() as t:
    for _, v in t.cursor(db=db):
        u = msgpack.Unpacker(raw=False, strict_map_key=False)
        u.feed(v)  # the record, then its checksum
        rows.append(next(u))
by = collections.defaultdict(list)
for r in rows:
    by[r['cand'].split(' ', 1)[0]].append(r)
for g, rs in sorted(by.items()):
    ok = sorted([r for r in rs if r['status'] == 'ok'], key=lambda r: r['time'])
    print(g, len(rs), 'trials,', len(rs) - len(ok), 'not ok')
    for r in ok[:4]:
        print('   %.1f us' % (r['time'] / 1e3), r['cand'][len(g) + 1:])
for g in sys.argv[2:]:
    d = collections.defaultdict(dict)
    for r in by.get(g, []):
        if 'wgmma' not in r['cand'] or r['status'] != 'ok':
            continue
        kv = dict(x.split('=') for x in r['cand'].split()[2:])
        d[(kv['bm'], kv['bn'], kv['wm'], kv['stages'], kv['mma'], kv['mcast'])][kv['raster']] = \
            round(r['time'] / 1e3)
    print(g, 'us by raster: (bm, bn, wm, stages, mma, mcast) {raster: us}')
    for k, v in sorted(d.items(), key=lambda kv: min(kv[1].values()))[:12]:
        if len(v) > 1:
            print('  ', k, v)
