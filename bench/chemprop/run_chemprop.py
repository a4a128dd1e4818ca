#!/usr/bin/env python3
"""run_chemprop.py - Chemprop on the splits molprop exported, results in
molprop's format.

    molprop bench --config configs/bench/paper.ini --export-splits SPLITS
    python3 bench/chemprop/run_chemprop.py --splits SPLITS --out THEIRS.tsv \
        --bin /path/to/venv/bin          # where chemprop_train (v1) or chemprop (v2) is
    molprop bench compare runs/bench/results.tsv THEIRS.tsv

For every dataset folder of SPLITS (written by `molprop bench
--export-splits`: dataset.tsv, data.csv, seed<S>/{train,val,test}.csv,
splits.json, split.tsv) and every model variant, trains Chemprop with its
defaults, which are molprop's (30 epochs, batch 50, hidden 300, depth 3, two
FFN layers, no dropout, Noam 1e-4 -> 1e-3 -> 1e-4 over 2 warm-up epochs), on
exactly that split, and appends one row per finished run to --out in the
columns of molprop's results file (a single write per row, so an interrupted
run keeps its finished rows; running it again skips them).  The split
checksum is the SHA-256 of the exported split.tsv, so `molprop bench
compare` can check both tools saw the same molecules.

Variants (Chemprop v1.6.1 flags; the paper's):
    dmpnn             (no extra flags)
    dmpnn-rdkit2d     --features_generator rdkit_2d_normalized --no_features_scaling
    ffn-morgan        --features_only --features_generator morgan
    ffn-morgan-count  --features_only --features_generator morgan_count
    ffn-rdkit2d       --features_only --features_generator rdkit_2d_normalized --no_features_scaling
The RDKit 2D features are computed once per split file (descriptastorus,
through chemprop.features) and passed with --features_path.

With --version 2 it drives Chemprop v2 (`chemprop train`, data.csv with
--splits-file, the v1-equivalent settings of ../shared/PEERS.md); v2 has no
features-only FFN, so only the two D-MPNN variants run there.

Needs only the Python standard library here; Chemprop runs in its own
environment (--bin).  molprop never imports or calls this.
"""
import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time

COLUMNS = ["tool", "dataset", "model", "seed", "split", "split_checksum", "data_sha256",
           "settings", "metric", "n_tasks", "test", "val", "test_tasks", "val_tasks", "epochs",
           "best_epoch", "n_train", "n_val", "n_test", "featurize_seconds", "train_seconds",
           "device", "precision", "version", "train_loss", "val_curve"]

V1_FLAGS = {
    "dmpnn": [],
    "dmpnn-rdkit2d": ["@rdkit2d", "--no_features_scaling"],
    "ffn-morgan": ["--features_only", "--features_generator", "morgan"],
    "ffn-morgan-count": ["--features_only", "--features_generator", "morgan_count"],
    "ffn-rdkit2d": ["--features_only", "@rdkit2d", "--no_features_scaling"],
}
V2_FLAGS = {
    "dmpnn": [],
    "dmpnn-rdkit2d": ["--molecule-featurizers", "v1_rdkit_2d_normalized",
                      "--no-descriptor-scaling"],
}
V1_METRIC = {"rmse": "rmse", "mae": "mae", "auc": "auc", "prc-auc": "prc-auc"}
V2_METRIC = {"rmse": "rmse", "mae": "mae", "auc": "roc", "prc-auc": "prc"}


def read_info(folder):
    info, targets = {}, []
    with open(os.path.join(folder, "dataset.tsv")) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("\t")
            if key == "target":
                targets.append(value)
            else:
                info[key] = value
    info["targets"] = targets
    return info


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def count_rows(path):
    with open(path) as f:
        return max(0, sum(1 for line in f if line.strip()) - 1)


def fmt(x, spec="%.9g"):
    return "nan" if x is None or x != x else spec % x


def fmt_list(xs):
    return ",".join(fmt(x, "%.6g") for x in xs) if xs else "-"


def done_runs(path):
    """(dataset, model, seed) of the rows already in the results file."""
    done = set()
    if not os.path.exists(path):
        return done
    with open(path) as f:
        data = f.read()
    lines = data.split("\n")
    if not data.endswith("\n"):
        lines = lines[:-1]   # a torn last row does not count
    for line in lines[1:]:
        fields = line.split("\t")
        if len(fields) == len(COLUMNS):
            done.add((fields[1], fields[2], int(fields[3])))
    return done


def append_row(path, row):
    """One row with one write() on an O_APPEND descriptor: whole or absent."""
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    text = ("\t".join(COLUMNS) + "\n" if new else "") + "\t".join(row) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def rdkit2d_features(python, csv, smiles_column, cache):
    """The rdkit_2d_normalized features of a split file, computed once (.npz),
    named by dataset, seed and part (DATASET-seedS-train.npz).  The file is
    checked to hold one row per molecule of the split file: Chemprop v1 does
    not check, and would silently read the first rows of another file."""
    seed_dir = os.path.dirname(csv)
    dataset = os.path.basename(os.path.dirname(seed_dir))
    out = os.path.join(cache, "%s-%s-%s.npz" % (dataset, os.path.basename(seed_dir),
                                                os.path.basename(csv).replace(".csv", "")))
    if os.path.exists(out):
        check = ("import sys, numpy as np\n"
                 "n = np.load(sys.argv[1])['features'].shape[0]\n"
                 "sys.exit(0 if n == int(sys.argv[2]) else 1)\n")
        if subprocess.run([python, "-c", check, out, str(count_rows(csv))]).returncode:
            sys.exit("%s: not one row per molecule of %s" % (out, csv))
        return out
    code = ("import sys, numpy as np, pandas as pd\n"
            "from chemprop.features import get_features_generator\n"
            "g = get_features_generator('rdkit_2d_normalized')\n"
            "df = pd.read_csv(sys.argv[1])\n"
            "x = np.array([g(s) for s in df[sys.argv[2]]], dtype=float)\n"
            "x = np.where(np.isnan(x), 0, x)\n"
            "np.savez_compressed(sys.argv[3] + '.tmp.npz', features=x)\n")
    subprocess.run([python, "-c", code, csv, smiles_column, out[:-4]], check=True)
    os.replace(out[:-4] + ".tmp.npz", out)
    return out


def parse_v1_log(path, metric):
    """Per-epoch mean of the logged losses, validation scores, best val/epoch."""
    losses, vals, cur = [], [], []
    best_val, best_epoch = float("nan"), 0
    with open(path) as f:
        for line in f:
            if re.match(r"^Epoch \d+", line):
                if cur or losses:
                    losses.append(sum(cur) / len(cur) if cur else float("nan"))
                cur = []
            m = re.match(r"^Loss = ([-+0-9.eE]+)", line)
            if m:
                cur.append(float(m.group(1)))
            m = re.match(r"^Validation %s = ([-+0-9.eEnaif]+)" % re.escape(metric), line)
            if m:
                vals.append(float(m.group(1)))
            m = re.search(r"best validation %s = ([-+0-9.eEnaif]+) on epoch (\d+)" %
                          re.escape(metric), line)
            if m:
                best_val, best_epoch = float(m.group(1)), int(m.group(2)) + 1
    losses.append(sum(cur) / len(cur) if cur else float("nan"))
    n = min(len(losses), len(vals)) if vals else len(losses)
    return losses[:n], vals[:n], best_val, best_epoch


def run_v1(args, info, folder, seed, model, work):
    sub = os.path.join(folder, "seed%d" % seed)
    csv = {k: os.path.join(sub, k + ".csv") for k in ("train", "val", "test")}
    metric = V1_METRIC[info["metric"]]
    cmd = [os.path.join(args.bin, "chemprop_train"),
           "--data_path", csv["train"], "--separate_val_path", csv["val"],
           "--separate_test_path", csv["test"], "--dataset_type", info["task_type"],
           "--metric", metric, "--smiles_columns", info["smiles_column"],
           "--target_columns"] + info["targets"] + [
           "--save_dir", work, "--epochs", str(args.epochs), "--batch_size", "50",
           "--seed", str(seed), "--pytorch_seed", str(seed), "--num_workers", "0", "--quiet"]
    for flag in V1_FLAGS[model]:
        if flag == "@rdkit2d":
            python = os.path.join(args.bin, "python")
            cache = os.path.join(args.work, "features")
            os.makedirs(cache, exist_ok=True)
            paths = [rdkit2d_features(python, csv[k], info["smiles_column"], cache)
                     for k in ("train", "val", "test")]
            cmd += ["--features_path", paths[0], "--separate_val_features_path", paths[1],
                    "--separate_test_features_path", paths[2]]
        else:
            cmd.append(flag)
    env = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    t0 = time.time()
    with open(os.path.join(work, "stdout.log"), "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT, env=env)
    seconds = time.time() - t0
    tasks = []
    with open(os.path.join(work, "test_scores.csv")) as f:
        next(f)
        for line in f:
            # "Task,Mean m,Std m,Fold 0 m": the task name may hold commas
            parts = line.rstrip("\n").rsplit(",", 3)
            tasks.append(float(parts[1]))
    test = float("nan")
    with open(os.path.join(work, "quiet.log")) as f:
        for line in f:
            m = re.match(r"^Overall test %s = ([-+0-9.eEnaif]+)" % re.escape(metric), line)
            if m:
                test = float(m.group(1))
    losses, vals, best_val, best_epoch = parse_v1_log(os.path.join(work, "verbose.log"), metric)
    return dict(test=test, val=best_val, test_tasks=tasks, best_epoch=best_epoch,
                losses=losses, vals=vals, seconds=seconds, version="chemprop 1.6.1")


def run_v2(args, info, folder, seed, model, work):
    sub = os.path.join(folder, "seed%d" % seed)
    metric = V2_METRIC[info["metric"]]
    cmd = [os.path.join(args.bin, "chemprop"), "train", "-i", os.path.join(folder, "data.csv"),
           "-s", info["smiles_column"], "--target-columns"] + info["targets"] + [
           "-t", info["task_type"], "--splits-file", os.path.join(sub, "splits.json"),
           "--pytorch-seed", str(seed), "--metrics", metric,
           "--multi-hot-atom-featurizer-mode", "V1", "--aggregation", "mean", "-b", "50",
           "--epochs", str(args.epochs), "-n", "0", "--accelerator", "cpu", "--devices", "1",
           "-o", work, "--logfile", os.path.join(work, "train.log")] + V2_FLAGS[model]
    t0 = time.time()
    with open(os.path.join(work, "stdout.log"), "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.time() - t0
    test = float("nan")
    with open(os.path.join(work, "train.log")) as f:
        for line in f:
            m = re.search(r"test/%s\W+([-+0-9.eE]+)" % re.escape(metric), line)
            if m:
                test = float(m.group(1))
    return dict(test=test, val=float("nan"), test_tasks=[], best_epoch=0, losses=[], vals=[],
                seconds=seconds, version="chemprop 2")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--splits", required=True, help="molprop bench --export-splits folder")
    p.add_argument("--out", required=True, help="results file to append to (THEIRS.tsv)")
    p.add_argument("--bin", required=True, help="the bin/ folder of Chemprop's environment")
    p.add_argument("--version", type=int, default=1, choices=(1, 2))
    p.add_argument("--datasets", default="", help="comma-separated (default: every folder)")
    p.add_argument("--models", default="dmpnn,dmpnn-rdkit2d,ffn-morgan,ffn-morgan-count,"
                   "ffn-rdkit2d")
    p.add_argument("--seeds", default="", help="comma-separated (default: every seed folder)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--work", default="", help="scratch folder (default: OUT.work)")
    args = p.parse_args()
    args.work = args.work or args.out + ".work"
    os.makedirs(args.work, exist_ok=True)
    datasets = [d for d in args.datasets.split(",") if d] or sorted(
        d for d in os.listdir(args.splits) if os.path.exists(
            os.path.join(args.splits, d, "dataset.tsv")))
    models = [m for m in args.models.split(",") if m]
    table = V1_FLAGS if args.version == 1 else V2_FLAGS
    done = done_runs(args.out)
    for ds in datasets:
        folder = os.path.join(args.splits, ds)
        info = read_info(folder)
        seeds = [int(s) for s in args.seeds.split(",") if s] or sorted(
            int(d[4:]) for d in os.listdir(folder) if re.match(r"^seed\d+$", d))
        for model in models:
            if model not in table:
                print("skip %s: not available in Chemprop v%d" % (model, args.version))
                continue
            for seed in seeds:
                if (ds, model, seed) in done:
                    continue
                work = os.path.join(args.work, "%s-%s-%d" % (ds, model, seed))
                shutil.rmtree(work, ignore_errors=True)   # an interrupted try's logs
                os.makedirs(work)
                run = run_v1 if args.version == 1 else run_v2
                r = run(args, info, folder, seed, model, work)
                sub = os.path.join(folder, "seed%d" % seed)
                n_tasks = len(info["targets"])
                row = ["chemprop", ds, model, str(seed), "scaffold_balanced",
                       sha256_file(os.path.join(sub, "split.tsv"))[:16], info["sha256"][:16],
                       "-", info["metric"], str(n_tasks), fmt(r["test"]), fmt(r["val"]),
                       fmt_list(r["test_tasks"]) if len(r["test_tasks"]) == n_tasks else "-",
                       "-", str(args.epochs), str(r["best_epoch"]),
                       str(count_rows(os.path.join(sub, "train.csv"))),
                       str(count_rows(os.path.join(sub, "val.csv"))),
                       str(count_rows(os.path.join(sub, "test.csv"))), "nan",
                       "%.3f" % r["seconds"], "cpu", "fp32", r["version"],
                       fmt_list(r["losses"]),
                       fmt_list(r["vals"]) if len(r["vals"]) == len(r["losses"]) else "-"]
                append_row(args.out, row)
                print("%-12s %-17s seed %d  test %s %s  (%.0f s)" % (
                    ds, model, seed, info["metric"], fmt(r["test"], "%.4f"), r["seconds"]))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
