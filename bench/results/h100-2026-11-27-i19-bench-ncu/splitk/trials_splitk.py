import lmdb, msgpack, collections, sys
env = lmdb.open(sys.argv[1], subdir=False, readonly=True, max_dbs=16, lock=False)
db = env.open_db(b'trials')
by=collections.defaultdict(list)
with env.begin() as t:
    for k, v in t.cursor(db=db):
        u = msgpack.Unpacker(raw=False, strict_map_key=False); u.feed(v); r=next(u)
        by[k[:40]].append(r)
for key, rows in by.items():
    g=collections.defaultdict(list)
    for r in rows: g[r['cand'].split(' ',1)[0]].append(r)
    print('== job', key.hex()[-8:], {m: len(v) for m,v in g.items()})
    for m, rs in g.items():
        if m=='record': continue
        ok=sorted([r for r in rs if r['status']=='ok'], key=lambda r:r['time'])
        if len(ok)<3: continue
        print(' ', m, len(rs), 'trials; not ok', collections.Counter(r['status'] for r in rs if r['status']!='ok'))
        for r in ok[:3]: print('    best %.2f us'%(r['time']/1e3), r['cand'][3:180])
        for lab, f in (('cluster', lambda c: 'splitk_mode=cluster mma=wgmma' in c), ('parallel', lambda c: 'mma=wgmma' in c and 'splitk=1 ' not in c and 'splitk_mode=parallel' in c), ('wg nosplit', lambda c: 'mma=wgmma' in c and 'splitk=1 ' in c), ('gemv', lambda c: c.split()[1]=='gemv')):
            l=[r for r in ok if f(r['cand'])]
            for r in l[:2]: print('    %s %.2f us (%d tried)'%(lab, r['time']/1e3, len(l)), r['cand'][3:180])
