#!/usr/bin/env python3
"""Summarises tune.sh's cache (data.mdb): per tuning job (the key's signature bytes) its trial
count and ten fastest verified candidates, then those whose text matches PATTERN (a regex).
usage: trials.py DATA.mdb [PATTERN]   (needs the lmdb and msgpack Python packages)"""
import collections, lmdb, msgpack, sys, re
env = lmdb.open(sys.argv[1], subdir=False, readonly=True, max_dbs=16, lock=False)
db = env.open_db(b'trials')
rows=[]
with env.begin() as t:
    for k, v in t.cursor(db=db):
        u = msgpack.Unpacker(raw=False, strict_map_key=False); u.feed(v); r=next(u); r['key']=k; rows.append(r)
by=collections.defaultdict(list)
for r in rows:
    if not r['cand'].startswith('m'): continue
    by[r["key"][48:64]].append(r)
pat = sys.argv[2] if len(sys.argv)>2 else ''
for g, rs in by.items():
    ok=sorted([r for r in rs if r['status']=='ok'], key=lambda r:r['time'])
    print(g[:8].hex(), len(rs), 'trials')
    for r in ok[:10]: print('   %.1f us'%(r['time']/1e3), r['cand'][:170])
    if pat:
        for r in [r for r in ok if re.search(pat, r['cand'])][:15]: print('  *%.1f us'%(r['time']/1e3), r['cand'][:170])
