#!/bin/sh
# make_seeds.sh - (re)makes the seed corpora of tests/fuzz/corpus/ (small
# inputs, each a few hundred bytes to a few KB) from hand-written cases and,
# for the binary formats, from files molprop itself writes.  The inputs a
# fuzzing campaign finds faults with are kept beside them as regress-*.
#   MOLPROP_BIN=build/molprop sh tests/fuzz/make_seeds.sh
set -eu
bin=${MOLPROP_BIN:-build/molprop}
here=$(cd "$(dirname "$0")" && pwd)
c=$here/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$c/csv" "$c/smiles" "$c/modelfile" "$c/cache"

python3 - "$c" <<'PY'
import os, sys
c = sys.argv[1]
def put(d, name, data):
    with open(os.path.join(c, d, name), "wb") as f:
        f.write(data)
# CSV: one mode byte (bit 0 gzip the rest, bit 1 small limits, bits 2-7 the
# column options, tests/fuzz/fuzz_csv.c), then the file.
csvs = {
    "plain": b"smiles,y\nCCO,1.5\nc1ccccc1,-2\n",
    "crlf_bom": b"\xef\xbb\xbfsmiles,y\r\nCCO,1\r\n\r\nCCN,\r\n",
    "quoted": b'smiles,"a,b",c\n"C(=O)O","1","2e3"\n"CC""N",,3\n',
    "multiline": b'smiles,y\n"CC\nO",1\nCCC,2\n',
    "blank_lines": b"\n\nsmiles,y\n \t\nCCO,1\n\n",
    "lone_cr": b"smiles,y\rCCO,1\rCCN,2\r",
    "ids": b"id,smiles,a,b\n1,CCO,0,1\n2,CCN,1,\n3,C,,0\n",
    "bad_quote": b'smiles,y\nC"C,1\n',
    "unterminated": b'smiles,y\n"CCO,1\n',
    "after_quote": b'smiles,y\n"CCO"x,1\n',
    "nul": b"smiles,y\nC\x00C,1\n",
    "bad_number": b"smiles,y\nCCO,abc\nCCN,nan\nC,inf\n",
    "fields": b"smiles,y\nCCO,1,2\n",
    "dup_names": b"smiles,y,y\nC,1,2\n",
    "no_name": b"smiles,y,\nC,1,2\n",
    "header_only": b"smiles,y\n",
    "empty": b"",
    "wide": b"smiles," + b",".join(b"t%d" % i for i in range(40)) + b"\n" +
            b"CCO," + b",".join(b"%d" % (i % 2) for i in range(40)) + b"\n",
    "long_field": b"smiles,y\n" + b"C" * 600 + b",1\n",
    "spaces": b"smiles , y\n CCO , 1 \n",
    "exponents": b"smiles,y\nC,1e-400\nCC,-0.0\nCCC,+3.\n",
}
for i, (name, text) in enumerate(sorted(csvs.items())):
    put("csv", name, bytes([0 | (i % 8) << 2]) + text)
for name in ("plain", "quoted", "multiline", "wide"):
    put("csv", name + "_gz", bytes([1]) + csvs[name])
for name in ("long_field", "wide", "quoted"):
    put("csv", name + "_small", bytes([2]) + csvs[name])
import zlib
co = zlib.compressobj(6, zlib.DEFLATED, 16 + 15)
gz = co.compress(csvs["plain"]) + co.flush()
put("csv", "raw_gzip", bytes([0]) + gz)
put("csv", "raw_gzip_cut", bytes([0]) + gz[:len(gz) // 2])
put("csv", "raw_gzip_two_members", bytes([0]) + gz + gz)
put("csv", "raw_gzip_trailing", bytes([0]) + gz + b"junk")
# SMILES: up to 8 per input, one a line.
smiles = {
    "simple": "CCO\nc1ccccc1\nCC(=O)O",
    "charged": "[NH4+]\n[O-]C(=O)C\nC[N+](C)(C)C",
    "stereo": "C[C@H](N)C(=O)O\nF/C=C/F\nC[C@@]1(O)CCCC1",
    "isotopes": "[13CH4]\n[2H]C([2H])([2H])O\n[235U]",
    "aromatic": "c1ccncc1\nc1ccsc1\nn1cccc1\nc1ccc2ccccc2c1",
    "rings": "C1CC2CCC1C2\nC12CCCCC1CCCC2\nC%10CCCCC%10",
    "invalid": "C1CC\nc1cccc1\nC(C\n)\n[Xx]\nC==C",
    "empty": "\n\n",
    "hydrogens": "[H][H]\n[H]\n[HH]\nC[H]",
    "metal": "[Na+].[Cl-]\n[Fe+2]\nO=[Mn](=O)(=O)[O-]",
    "dative": "C->N\n[Cu]<-N",
    "wildcard": "*C\nC*C\n[*:1]CC",
    "maps": "[CH3:1][OH:2]\n[C:1]1CC[C:2]1",
    "long_chain": "C" * 300,
    "over_limit": "C" * 1100,
    "deep_branches": "C(" * 60 + "C" + ")" * 60,
    "drug": "CC(=O)Oc1ccccc1C(=O)O\nCN1C=NC2=C1C(=O)N(C(=O)N2C)C\nCC(C)Cc1ccc(cc1)C(C)C(=O)O",
    "macrocycle": "C1CCCCCCCCCCCCCCCCCCCCCCCCCCCCC1",
    "boron": "B(O)(O)c1ccccc1\n[BH4-]",
    "phosphorus": "P(=O)(O)(O)O\nc1ccc(cc1)P(c1ccccc1)c1ccccc1",
}
for name, text in smiles.items():
    put("smiles", name, text.encode())
PY

# Model files (a leading byte: 'R' recomputes the CRC; 'N' keeps the file as
# it is) from tiny trainings, and feature caches from small inputs.
printf 'smiles,a,b\nCCO,1,0\nCCN,2,1\nc1ccccc1,3,0\nCC(=O)O,4,1\nCCCl,5,0\nCOC,6,1\nCC=O,7,0\nC#N,8,1\nCCOC,9,0\nOCCO,1,1\n' > "$tmp/d.csv"
train() {   # train NAME ARGS...
    name=$1; shift
    "$bin" train --data "$tmp/d.csv" --epochs 1 --hidden 4 --threads 1 --quiet --save-dir "$tmp/$name" "$@" >/dev/null 2>&1
    { printf 'N'; cat "$tmp/$name/model.mpm"; } > "$c/modelfile/$name"
    { printf 'R'; cat "$tmp/$name/model.mpm"; } > "$c/modelfile/${name}_crc"
}
train dmpnn --target-columns a --depth 2 --ffn-layers 1
train dmpnn_cls --target-columns b --task classification --depth 2
train dmpnn_two --depth 2 --ensemble-size 2 --ffn-layers 1
train ffn_morgan --model ffn --features morgan --target-columns a --ffn-layers 2
train dmpnn_v2 --target-columns a --atom-layout v2 --aggregation norm --depth 2 --ffn-layers 1
feat() {   # feat NAME SMILES... (featurize options from FEAT_ARGS)
    name=$1; shift
    { echo smiles; for s in "$@"; do echo "$s"; done; } > "$tmp/$name.csv"
    "$bin" featurize --data "$tmp/$name.csv" --out "$tmp/$name.mpf" --threads 1 $FEAT_ARGS >/dev/null 2>&1
    { printf 'N'; cat "$tmp/$name.mpf"; } > "$c/cache/$name"
    { printf 'R'; cat "$tmp/$name.mpf"; } > "$c/cache/${name}_crc"
}
FEAT_ARGS="" feat three CCO c1ccccc1 'CC(=O)O'
FEAT_ARGS="" feat invalid CCO 'C1CC' c1ccncc1
FEAT_ARGS="--scaffolds" feat scaffolds 'c1ccccc1CC' 'C1CCCCC1O' CCO
FEAT_ARGS="--atom-layout v2" feat v2 'C[C@H](N)C(=O)O' '[NH4+]'
FEAT_ARGS="--atom-layout organic --scaffolds" feat organic 'c1ccsc1' 'CCCl'
ls "$c"/* | wc -l

# config: a verb byte (tests/fuzz/fuzz_config.c: 0 train, 1 predict, 2 eval,
# 3 featurize, 4 split, 5 bench, 6 data, 7 hpopt), then an INI file; cli: a verb byte
# the same way, then argv one argument per line (tests/fuzz/fuzz_cli.c).
mkdir -p "$c/config" "$c/cli"
python3 - "$c" "$here/../../configs" <<'PY'
import os, sys
c, configs = sys.argv[1], sys.argv[2]
def put(d, name, data):
    with open(os.path.join(c, d, name), "wb") as f:
        f.write(data)
verbs = ["train", "predict", "eval", "featurize", "split", "bench", "data"]
defaults = open(os.path.join(configs, "defaults.ini"), "rb").read()
for i, v in enumerate(verbs):   # each verb's own section of defaults.ini
    start = defaults.index(b"[%s]" % v.encode())
    end = defaults.find(b"\n[", start + 1)
    put("config", "defaults_" + v, bytes([i]) + defaults[start:end if end > 0 else None])
put("config", "esol", b"\x00" + open(os.path.join(configs, "esol.ini"), "rb").read())
put("config", "bench_quick", b"\x05" + open(os.path.join(configs, "bench", "quick.ini"), "rb").read())
put("config", "errors", b"\x00[train]\nepochs = x\n")
put("config", "unknown", b"\x01[predict]\nmodel = m.mpm\nnope = 1\n[other]\n")
put("config", "comments", b"\x03; c\n# c\n[featurize]\ndata = a.csv ; inline\nscaffolds=yes\n  gz = 1\n")
put("config", "no_section", b"\x04data = x.csv\nout = d\n")
put("config", "bad_line", b"\x06[data]\ndest\n")
put("config", "long_value", b"\x00[train]\ndata = " + b"a" * 3000 + b"\n")
cli = {
    "train": b"\x00--data\nesol.csv\n--save-dir\nD\n--epochs=5\n--quiet\n--checkpoint-every\n2",
    "train_resume": b"\x00--resume\nD\n--threads\n1",
    "train_bad": b"\x00--epochs\n-3\n--hidden=\n--nope",
    "train_missing_value": b"\x00--data",
    "train_help": b"\x00--help",
    "predict": b"\x01--model\nm.mpm\n--data\nx.csv\n--out\np.csv\n--uncertainty\n--device=cpu",
    "eval": b"\x02--model=m\n--data=d\n--metric\nauc",
    "featurize": b"\x03--data\nx\n--dump\nd\n--gz\n--atom-layout\nv2\n--no-morgan=true",
    "split": b"\x04--data\nx\n--out\nd\n--split\ncv\n--folds\n3\n--seed\n18446744073709551615",
    "bench": b"\x05--datasets\nesol,bbbp\n--models\nall\n--seeds\n0,1,2\n--split=random",
    "data_fetch": b"\x06fetch\nesol\nbbbp\n--mirror\n/nowhere\n--dest\nd",
    "data_positional": b"\x06list\n-x\n--\n-",
    "unexpected": b"\x00positional\n---\n--=x",
}
for k, v in cli.items():
    put("cli", k, v)
PY
