"""Tries every command with bad inputs and faults as a new user would, and sorts each outcome.

    python scripts/bad_inputs.py                  # the built-in model
    python scripts/bad_inputs.py --model DIR      # any model directory (the tests use a tiny random one)

Each case runs ``mia-fast`` in this process on files prepared in a fresh directory, and is one of:

- ``refused``: exit 2, exactly one line on stderr (``mia-fast: error: ...``) that says what is wrong (the words the
  case expects), and every file that was there byte-identical, none added;
- ``accepted``: a doubtful input the run goes on with (exit 0), saying so in one ``mia-fast: warning:`` line;
- ``unclear``: refused, but in more than one line or without saying what is wrong;
- ``litter``: refused, but a file was left behind (e.g. an empty output that blocks the corrected rerun);
- ``silent``: a bad input went through without a word (exit 0);
- ``harmful``: a file that was there changed or went;
- ``security``: the API key of a served-model case showed in a line printed or a file written;
- ``crash``: a traceback.

The served-model cases run against ``scripts/faulty_server.py``, a server that misbehaves on purpose in one way
each, in this process.

Prints one line per case and a table of outcomes; ``--json FILE`` writes both.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

OUTCOMES = ("refused", "accepted", "unclear", "litter", "silent", "harmful", "security", "crash")
# The most seconds a case may run: every one takes a few on the built-in model.
CASE_LIMIT_S = 300.0
KEY_VARIABLE = "MIA_FAST_BAD_INPUTS_KEY"
KEY = "sk-bad-inputs-7c1f9e2a"


@dataclass(frozen=True)
class Case:
    """A command line (``{name}`` fields are the prepared files; ``{M}`` the model options), the words its one
    line must hold, and whether the run is expected to go on with a warning."""

    name: str
    argv: str
    expect: str
    accepted: bool = False


SCORE = "score {data} {M} --methods loss,zlib --quiet"
SERVED = "score {data} --server-model tiny --api-key-env " + KEY_VARIABLE + " --methods loss --out {new} --quiet"
CASES = [
    # ---- input files ----
    Case("score: data file missing", "score {work}/nothere.jsonl {M} --out {new} --quiet", "no such file"),
    Case("score: data is a directory", "score {work} {M} --out {new} --quiet", "unsupported input format"),
    Case("score: unsupported input suffix", "score {text_file} {M} --out {new} --quiet", "unsupported input format"),
    Case("score: empty data file", "score {empty} {M} --out {new} --quiet", "holds no rows"),
    Case("score: malformed JSON line", "score {malformed} {M} --out {new} --quiet", "malformed JSON"),
    Case("score: no text field", "score {notext} {M} --out {new} --quiet", "has no 'text' field"),
    Case("score: text is a number", "score {numtext} {M} --out {new} --quiet", "not a string"),
    Case("score: --text-field absent", "score {data} {M} --out {new} --text-field body --quiet", "'body'"),
    Case("score: id field on some rows only", "score {strayid} {M} --out {new} --quiet", "'id' field"),
    Case("score: corrupt gzip", "score {badgz} {M} --out {new} --quiet", "cannot read"),
    Case("score: csv not UTF-8", "score {latin1} {M} --out {new} --quiet", "cannot read"),
    Case("score: corrupt parquet", "score {badparquet} {M} --out {new} --quiet", "cannot read"),
    Case("score: JSON that is not an array", "score {jsonobject} {M} --out {new} --quiet", "array of objects"),
    Case(
        "score: lone surrogate in a text", "score {surrogate} {M} --out {new} --quiet", "lone surrogate", accepted=True
    ),
    Case("score: no DATA", "score {M} --out {new} --quiet", "give DATA"),
    Case("score: --split without --suite", "score {data} {M} --out {new} --split x --quiet", "within a --suite"),
    # ---- outputs ----
    Case("score: output exists", SCORE + " --out {scores}", "exists; pass --resume"),
    Case("score: --resume and --overwrite", SCORE + " --out {scores} --resume --overwrite", "exclude each other"),
    Case("score: --out is the input", SCORE + " --out {data}", "is the input"),
    Case("score: --out is the input, --overwrite", SCORE + " --out {data} --overwrite", "is the input"),
    Case("score: --out is a link to the input", SCORE + " --out {link} --overwrite", "is the input"),
    Case("score: --out is ./ the input", SCORE + " --out {dotted} --overwrite", "is the input"),
    Case("score: unsupported output suffix", SCORE + " --out {work}/o.txt", "unsupported output format"),
    Case("score: output's folder is a file", SCORE + " --out {text_file}/o.jsonl", "{text_file}"),
    Case(
        "score: --resume with other methods",
        "score {data} {M} --methods loss --out {scores} --resume --quiet",
        "other methods",
    ),
    Case(
        "score: --resume without the start token",
        SCORE + " --out {scores} --resume --no-prepend-start --max-length 16",
        "prepend_start",
    ),
    Case("score: --resume with other dtype", SCORE + " --out {scores} --resume --dtype bf16", "dtype"),
    Case(
        "score: --resume onto other texts",
        "score {other} {M} --methods loss,zlib --out {scores} --resume --quiet",
        "differ from those",
    ),
    Case(
        "score: --resume onto fewer rows",
        "score {short} {M} --methods loss,zlib --out {scores} --resume --quiet",
        "only 3",
    ),
    Case("score: --resume, manifest tampered", SCORE + " --out {tampered} --resume", "checksum mismatch"),
    Case("score: --resume, manifest missing", SCORE + " --out {orphan} --resume", "no manifest"),
    # ---- options ----
    Case("score: --methods ,", "score {data} {M} --methods , --out {new} --quiet", "method"),
    Case("score: unknown method", "score {data} {M} --methods lossy --out {new} --quiet", "unknown method"),
    Case("score: --k 0", SCORE + " --methods mink --k 0 --out {new}", "k"),
    Case("score: --k 2", SCORE + " --methods mink --k 2 --out {new}", "k"),
    Case("score: --k abc", SCORE + " --methods mink --k abc --out {new}", "abc"),
    Case("score: bad k in a method name", "score {data} {M} --methods mink_x --out {new} --quiet", "bad k"),
    Case("score: --batch-tokens 0", SCORE + " --batch-tokens 0 --out {new}", "--batch-tokens"),
    Case("score: --batch-tokens -5", SCORE + " --batch-tokens -5 --out {new}", "--batch-tokens"),
    Case("score: --block-rows 0", SCORE + " --block-rows 0 --out {new}", "--block-rows"),
    Case("score: --max-length 0", SCORE + " --max-length 0 --out {new}", "--max-length"),
    Case("score: --max-words 0", SCORE + " --max-words 0 --out {new}", "--max-words"),
    Case("score: --a -1", "score {data} {M} --methods dcpdd --freq-table {table} --a -1 --out {new} --quiet", "--a"),
    Case("score: --a 0", "score {data} {M} --methods dcpdd --freq-table {table} --a 0 --out {new} --quiet", "--a"),
    Case("score: --a nan", "score {data} {M} --methods dcpdd --freq-table {table} --a nan --out {new} --quiet", "--a"),
    Case(
        "score: --samia-samples 0",
        "score {data} {M} --methods samia --samia-samples 0 --out {new} --quiet",
        "--samia-samples",
    ),
    Case("score: --pac-copies 0", "score {data} {M} --methods pac --pac-copies 0 --out {new} --quiet", "--pac-copies"),
    Case(
        "score: --conrecall-gamma inf",
        "score {data} {M} --methods conrecall --prefix-members {prefix} --prefix-nonmembers {prefix} "
        "--conrecall-gamma inf --out {new} --quiet",
        "gamma",
    ),
    Case(
        "score: --neighbor-count 0",
        "score {data} {M} --methods neighbor --neighbor-model word-drop --neighbor-count 0 --out {new} --quiet",
        "--neighbor-count",
    ),
    Case("score: --online 0", SCORE + " --online 0 --out {new}", "--online"),
    Case("score: --online-stride without --online", SCORE + " --online-stride 2 --out {new}", "need --online"),
    Case("score: --online-method unknown", SCORE + " --online 4 --online-method nope --out {new}", "online"),
    Case("score: --device cuda without CUDA", SCORE + " --device cuda --out {new}", "CUDA is not available"),
    Case("score: --device tpu", SCORE + " --device tpu --out {new}", "tpu"),
    Case("score: --dtype fp8", SCORE + " --dtype fp8 --out {new}", "--dtype"),
    Case("score: --backend cuda", SCORE + " --backend cuda --out {new}", "--backend"),
    Case("score: --ray-workers without --ray", SCORE + " --ray-workers 2 --out {new}", "need --ray"),
    Case("score: unknown option", SCORE + " --frobnicate --out {new}", "unrecognized arguments"),
    Case("score: --stats-cache is a file", SCORE + " --stats-cache {text_file} --out {new}", "is a file"),
    # ---- models ----
    Case(
        "score: model directory missing",
        "score {data} --model {work}/no-model --out {new} --quiet",
        "no such model directory",
    ),
    Case(
        "score: model directory without tokenizer",
        "score {data} --model {notokenizer} --out {new} --quiet",
        "tokenizer",
    ),
    Case("score: GGUF file missing", "score {data} --gguf {work}/none.gguf --out {new} --quiet", "not found"),
    Case("score: truncated GGUF", "score {data} --gguf {truncated_gguf} --out {new} --quiet", "GGUF"),
    Case(
        "score: --ref-model missing",
        "score {data} {M} --methods ref --ref-model {work}/no-ref --out {new} --quiet",
        "no such model directory",
    ),
    # ---- method inputs ----
    Case("score: dcpdd without a table", "score {data} {M} --methods dcpdd --out {new} --quiet", "--freq-table"),
    Case(
        "score: --freq-table missing",
        "score {data} {M} --methods dcpdd --freq-table {work}/no.freq --out {new} --quiet",
        "no.freq",
    ),
    Case(
        "score: --freq-table one flipped byte",
        "score {data} {M} --methods dcpdd --freq-table {bad_table} --out {new} --quiet",
        "checksum",
    ),
    Case(
        "score: --freq-table flipped, --overwrite",
        "score {data} {M} --methods loss,zlib,dcpdd --freq-table {bad_table} --out {scores} --overwrite --quiet",
        "checksum",
    ),
    Case(
        "score: recall without prefix", "score {data} {M} --methods recall --out {new} --quiet", "--prefix-nonmembers"
    ),
    Case(
        "score: --prefix-nonmembers missing",
        "score {data} {M} --methods recall --prefix-nonmembers {work}/no.txt --out {new} --quiet",
        "no.txt",
    ),
    Case(
        "score: --neighbor-field and --neighbor-model",
        SCORE + " --methods neighbor --neighbor-field n --neighbor-model word-drop --out {new}",
        "not both",
    ),
    Case(
        "score: --neighbor-field absent",
        "score {data} {M} --methods neighbor --neighbor-field n --out {new} --quiet",
        "'n'",
    ),
    Case(
        "score: --probe directory missing",
        "score {data} {M} --methods probe --probe {work}/no-probe --out {new} --quiet",
        "no such probe directory",
    ),
    # ---- eval ----
    Case("eval: no --report", "eval {data} {M} --quiet", "--report"),
    Case("eval: no labels", "eval {nolabels} {M} --report {work}/r --quiet", "labels"),
    Case("eval: one class only", "eval {oneclass} {M} --report {work}/r --quiet", "both classes"),
    Case("eval: --bootstrap 0", "eval {data} {M} --report {work}/r --bootstrap 0 --quiet", "--bootstrap"),
    Case("eval: --bootstrap -1", "eval {data} {M} --report {work}/r --bootstrap -1 --quiet", "--bootstrap"),
    Case("eval: --buckets x", "eval {data} {M} --report {work}/r --buckets x --quiet", "--buckets"),
    Case("eval: --compare of missing reports", "eval --compare {work}/a {work}/b", "{work}/a"),
    Case("eval: --compare of a non-report", "eval --compare {work} {work}", "metrics.json"),
    Case("eval: --out is the input", "eval {data} {M} --report {work}/r --out {data} --quiet", "is the input"),
    # ---- rescore ----
    Case("rescore: --stats missing", "rescore {data} --stats {work}/no.npz --out {new} --quiet", "no.npz"),
    Case("rescore: --stats is text named .npz", "rescore {data} --stats {text_npz} --out {new} --quiet", "TokenStats"),
    Case(
        "rescore: --stats holds an object array",
        "rescore {data} --stats {object_npz} --out {new} --quiet",
        "TokenStats",
    ),
    Case("rescore: --stats of other texts", "rescore {short} --stats {stats} --out {new} --quiet", "texts"),
    Case(
        "rescore: --stats changed after written",
        "rescore {data} --stats {tampered_stats} --out {new} --quiet",
        "changed",
    ),
    Case(
        "rescore: --stats-cache empty",
        "rescore {data} --stats-cache {work}/nocache --out {new} --quiet",
        "no stats cache",
    ),
    Case(
        "rescore: --stats and --stats-cache",
        "rescore {data} --stats {stats} --stats-cache {cache} --out {new}",
        "not allowed with",
    ),
    Case(
        "rescore: a pass the cache lacks",
        "rescore {data} --stats-cache {cache} --methods recall --prefix-nonmembers {prefix} --out {new} --quiet",
        "not in the stats cache",
    ),
    Case(
        "rescore: a method that needs the model",
        "rescore {data} --stats-cache {cache} --methods samia --out {new} --quiet",
        "method 'samia' needs the model",
    ),
    # ---- calibrate, classify ----
    Case("calibrate: no labels", "calibrate {nolabels} {M} --method loss --out {work}/t.json --quiet", "labels"),
    Case("calibrate: one class", "calibrate {oneclass} {M} --method loss --out {work}/t.json --quiet", "non-members"),
    Case(
        "calibrate: several columns",
        "calibrate {data} {M} --method mink --out {work}/t.json --quiet",
        "one score column",
    ),
    Case(
        "calibrate: --target-fpr 1.5",
        "calibrate {data} {M} --method loss --rule fpr --target-fpr 1.5 --out {work}/t.json --quiet",
        "fpr",
    ),
    Case("calibrate: threshold file exists", "calibrate {data} {M} --method loss --out {threshold} --quiet", "exists"),
    Case(
        "classify: threshold missing", "classify {data} {M} --threshold {work}/no.json --out {new} --quiet", "no.json"
    ),
    Case(
        "classify: threshold tampered",
        "classify {data} {M} --threshold {tampered_threshold} --out {new} --quiet",
        "checksum",
    ),
    Case(
        "classify: threshold not JSON", "classify {data} {M} --threshold {text_file} --out {new} --quiet", "threshold"
    ),
    Case(
        "classify: threshold of another method",
        "classify {data} {M} --threshold {threshold} --method zlib --out {new} --quiet",
        "not zlib",
    ),
    Case(
        "classify: another --max-length",
        "classify {data} {M} --threshold {threshold} --max-length 16 --out {new} --quiet",
        "max_length",
    ),
    Case(
        "classify: another --dtype",
        "classify {data} {M} --threshold {threshold} --dtype bf16 --out {new} --quiet",
        "dtype",
    ),
    # ---- audit-unlearning, dataset-inference ----
    Case(
        "audit-unlearning: --after missing",
        "audit-unlearning {data} --before {model} --method loss --report {work}/u --quiet",
        "--after",
    ),
    Case(
        "audit-unlearning: several columns",
        "audit-unlearning {data} --before {model} --after {model} --method mink --report {work}/u --quiet",
        "one score column",
    ),
    Case(
        "audit-unlearning: report not empty",
        "audit-unlearning {data} --before {model} --after {model} --method loss --report {corpus_dir} --quiet",
        "not empty",
    ),
    Case(
        "dataset-inference: same file twice",
        "dataset-inference {data} {data} {M} --report {work}/d --quiet",
        "same file",
    ),
    Case(
        "dataset-inference: overlapping sets",
        "dataset-inference {suspect} {overlap} {M} --report {work}/d --quiet",
        "share 6 text",
    ),
    Case(
        "dataset-inference: validation missing",
        "dataset-inference {data} {work}/no.jsonl {M} --report {work}/d --quiet",
        "no such file",
    ),
    # ---- freq ----
    Case(
        "freq build: empty corpus",
        "freq build {empty_corpus} --tokenizer {model} --out {work}/e.freq --quiet",
        "no tokens",
    ),
    Case(
        "freq build: corpus missing",
        "freq build {work}/nocorpus --tokenizer {model} --out {work}/e.freq --quiet",
        "nocorpus",
    ),
    Case(
        "freq build: tokenizer missing",
        "freq build {corpus_dir} --tokenizer {work}/no-tok --out {work}/e.freq --quiet",
        "no-tok",
    ),
    Case(
        "freq build: --workers 0",
        "freq build {corpus_dir} --tokenizer {model} --workers 0 --out {work}/e.freq --quiet",
        "--workers",
    ),
    Case("freq build: output exists", "freq build {corpus_dir} --tokenizer {model} --out {table} --quiet", "exists"),
    Case(
        "freq build: one file given twice",
        "freq build {corpus_file} {corpus_file} --tokenizer {model} --out {work}/e.freq --quiet",
        "given twice",
    ),
    Case(
        "freq build: a folder and a file in it",
        "freq build {corpus_dir} {corpus_file} --tokenizer {model} --out {work}/e.freq --quiet",
        "given twice",
    ),
    Case("freq build: a named pipe", "freq build {fifo} --tokenizer {model} --out {work}/e.freq --quiet", "named pipe"),
    Case("freq info: not a table", "freq info {text_file}", "frequency table"),
    Case("freq info: one flipped byte", "freq info {bad_table}", "checksum"),
    Case("freq merge: a table missing", "freq merge {table} {work}/no.freq --out {work}/m.freq", "no.freq"),
    Case(
        "freq build-tokens: --vocab-size 0",
        "freq build-tokens {text_file} --vocab-size 0 --out {work}/t.freq --quiet",
        "--vocab-size",
    ),
    # ---- demo, probe ----
    Case("demo: --epochs 0", "demo {M} --report {work}/demo --epochs 0 --quiet", "--epochs"),
    Case("demo: --lr 0", "demo {M} --report {work}/demo --lr 0 --quiet", "--lr"),
    Case("demo: report not empty", "demo {M} --report {corpus_dir} --quiet", "not empty"),
    Case(
        "probe train: --train missing",
        "probe train --train {work}/no.jsonl --dev {data} {M} --out {work}/p --quiet",
        "no such file",
    ),
    Case(
        "probe train: one class",
        "probe train --train {oneclass} --dev {data} {M} --out {work}/p --quiet",
        "non-members",
    ),
    Case(
        "probe train: --epochs 0",
        "probe train --train {data} --dev {data} {M} --epochs 0 --out {work}/p --quiet",
        "--epochs",
    ),
    # ---- one output gate for every command (issue 36) ----
    Case(
        "calibrate: --out is the data, --overwrite",
        "calibrate {data} {M} --method loss --out {data} --overwrite --quiet",
        "is the input",
    ),
    Case(
        "classify: --out is the threshold, --overwrite",
        "classify {data} {M} --threshold {threshold} --out {threshold} --overwrite --quiet",
        "is the input",
    ),
    Case("run: out is the run file, --overwrite", "run {self_run} {M} --overwrite --quiet", "is the input"),
    Case(
        "freq build: --out is the corpus, --overwrite",
        "freq build {corpus_file} --tokenizer {model} --out {corpus_file} --overwrite --quiet",
        "is the input",
    ),
    Case(
        "freq merge: --out is an input table, --overwrite",
        "freq merge {table} {table_copy} --out {table} --overwrite",
        "is the input",
    ),
    Case("eval: report folder holds the user's files", "eval {data} {M} --report {user_report} --quiet", "not empty"),
    Case(
        "eval: report folder holds the input", "eval {data} {M} --report {work} --overwrite --quiet", "holds the input"
    ),
    Case("score: --out is a folder", SCORE + " --out {folder_out} --overwrite", "is a folder"),
    Case("score: --out is a dangling link", SCORE + " --out {dangling}", "link to nothing"),
    Case(
        "calibrate: --out is a dangling link", "calibrate {data} {M} --method loss --out {dangling}", "link to nothing"
    ),
    Case("probe train: --out is a file", "probe train --train {data} --dev {data} {M} --out {text_file}", "is a file"),
    Case("score: the user's OUT.lock", SCORE + " --out {user_lock} --overwrite", "not a lock of mia-fast"),
    Case("score: the user's OUT.partial/, --overwrite", SCORE + " --out {user_stage} --overwrite", "left as it is"),
    Case("score: the user's OUT.manifest.json", SCORE + " --out {user_manifest}", "not a manifest of mia-fast"),
    Case(
        "freq build: the user's OUT.partial/, --overwrite",
        "freq build {corpus_dir} --tokenizer {model} --out {user_checkpoints} --overwrite --quiet",
        "not a checkpoint folder",
    ),
    # ---- resume checks what it keeps ----
    Case("score: --resume, a staged score edited", SCORE + " --out {stage_edited} --resume", "changed after"),
    Case("score: --resume, the stage cut short", SCORE + " --out {stage_cut} --resume", "shorter than its manifest"),
    Case("score: --resume, the stage's manifest gone", SCORE + " --out {stage_orphan} --resume", "no manifest"),
    Case("score: --resume, the output edited", SCORE + " --out {edited} --resume", "changed after"),
    Case(
        "rescore: a damaged cache shard",
        "rescore {data} --stats-cache {damaged_cache} --methods loss --out {new} --quiet",
        "is damaged",
    ),
    # ---- inputs and options ----
    Case("score: a named pipe as DATA", "score {fifo} {M} --out {new} --quiet", "named pipe"),
    Case(
        "score: the same id twice",
        "score {dupids} {M} --methods loss --out {new} --quiet",
        "more than once",
        accepted=True,
    ),
    Case(
        "eval: a text labelled both ways",
        "eval {contradictory} {M} --methods loss --report {work}/r --bootstrap 20 --no-blind --quiet",
        "labelled both",
        accepted=True,
    ),
    Case("eval: --bootstrap 1000000000", "eval {data} {M} --report {work}/r --bootstrap 1000000000", "--bootstrap"),
    Case("score: --block-rows 10**12", SCORE + " --block-rows 1000000000000 --out {new}", "--block-rows"),
    # ---- served models: the answers checked, the key never shown ----
    Case("server: /v1/models is a list", SERVED + " --server {server_models_list}", "/v1/models"),
    Case("server: completions answer a list", SERVED + " --server {server_completions_list}", "/v1/completions"),
    Case("server: a log-prob is a string", SERVED + " --server {server_logprob_string}", "not a number"),
    Case("server: an entry is a bare float", SERVED + " --server {server_bare_float}", "/v1/completions"),
    Case("server: NaN log-probs", SERVED + " --server {server_nan}", "log-prob"),
    Case("server: +inf log-probs", SERVED + " --server {server_inf}", "log-prob"),
    Case("server: positive log-probs", SERVED + " --server {server_positive}", "log-prob"),
    Case("server: token ids as strings", SERVED + " --server {server_tokens_strings}", "/tokenize"),
    Case(
        "server: an answer a byte at a time",
        SERVED + " --server {server_slow_drip} --server-timeout 1",
        "--server-timeout",
    ),
    Case(
        "server: the key in --server's query",
        "score {data} --server http://127.0.0.1:9/v1?api_key=" + KEY + " --server-model tiny --out {new} --quiet",
        "without a query",
    ),
    Case(
        "server: model names echo the key",
        SERVED.replace("--server-model tiny", "--server-model other") + " --server {server_echo_key}",
        "not 'other'",
    ),
    Case(
        "server: a refusal echoes the key",
        SERVED + " --server {server_refuse_echo_key}",
        "refused the key",
    ),
    # ---- run files, URLs and the lines that echo them ----
    Case("run: the run file is a loop of links", "run {loop_toml}", "a loop of links"),
    Case("run: the run file is a directory", "run {work}", "is a directory"),
    Case("run: the run file is a named pipe", "run {fifo}", "named pipe"),
    Case("run: a 50 MB run file", "run {huge_toml}", "too large for a run file"),
    Case("run: a deeply nested array", "run {deep_toml}", "nest 5000 deep"),
    Case("run: - (standard input, empty)", "run -", "standard input: no command"),
    Case("run: resume = true under [output]", "run {resume_toml}", "--resume is not written in a run file"),
    Case("run: an unknown section [foo.bar]", "run {foo_toml}", "unknown section [foo]"),
    Case("run: an [eval] section in a score file", "run {eval_section_toml}", "holds the options of `mia-fast eval`"),
    Case("run: settings of a method not requested", "run {other_method_toml} --out {new}", "not among the methods"),
    Case("run: a 500,000-character key", "run {long_key_toml}", "(500,005 characters)"),
    Case("run: a key pasted as api_key_env", "run {pasted_key_toml}", "takes the name of the environment variable"),
    Case(
        "server: an unclosed IPv6 bracket",
        "score {data} --server http://[::1 --server-model tiny --out {new} --quiet",
        "no closing bracket",
    ),
    Case("server: an IPv6 server is shown in brackets", SERVED + " --server http://[::1]:{closed_port6}", "[::1]:"),
    Case(
        "server: --print-config, the key in the URL's query",
        "score {data} --server http://127.0.0.1:9/?api_key=" + KEY + " --server-model tiny --out {new} --print-config",
        "without a query",
    ),
    Case(
        "server: --print-config, the key in the URL's user part",
        "score {data} --server http://user:" + KEY + "@127.0.0.1:9/ --server-model tiny --out {new} --print-config",
        "must not hold a user",
    ),
    Case(
        "server: a key pasted as --api-key-env",
        "score {data} --server http://127.0.0.1:9 --server-model tiny --api-key-env " + KEY + " --out {new} --quiet",
        "takes the name of the environment variable",
    ),
    Case(
        "server: the key in the URL's path, nothing listening",
        SERVED + " --server http://127.0.0.1:{closed_port}/" + KEY + "/v1 --server-retry 0",
        "refuses connections",
    ),
    Case("score: a CSV header repeats text", "score {dup_text_csv} {M} --out {new} --quiet", "'text' is named twice"),
    Case(
        "eval: a CSV header repeats label",
        "eval {dup_label_csv} {M} --report {work}/r --quiet",
        "'label' is named twice",
    ),
    Case("score: a parquet file repeats text", "score {dup_parquet} {M} --out {new} --quiet", "'text' is named twice"),
    Case(
        "score: a checkpoint whose keys were renamed",
        "score {data} --model {work}/renamed-keys --out {new} --quiet",
        "weights it needs are not in the checkpoint",
    ),
    Case(
        "score: config.json names another model type",
        "score {data} --model {work}/other-type --out {new} --quiet",
        "config.json describes a 'gpt_neox' model",
    ),
    Case(
        "score: config.json disagrees with the checkpoint's shapes",
        "score {data} --model {work}/other-shapes --out {new} --quiet",
        "config.json does not fit these weights",
    ),
    Case(
        "eval: every member text blank",
        "eval {blank_members} {M} --report {work}/blank-report --quiet",
        "all 4 member rows have no text to score",
    ),
    Case(
        "score: a model's embedding smaller than its tokenizer",
        "score {data} --model {work}/small-vocabulary --out {new} --quiet",
        "but the model's embedding has",
    ),
    Case(
        "score: a JSON record repeats text",
        "score {dup_key_jsonl} {M} --out {new} --quiet",
        "dup_key.jsonl:2: the field 'text' is named more than once",
    ),
    Case(
        "freq build: a JSON record repeats text",
        "freq build {dup_key_jsonl} --tokenizer {model} --out {work}/k.freq --quiet",
        "dup_key.jsonl:2: the field 'text' is named more than once",
    ),
    # ---- one tokenizer identity (issue 67) ----
    Case("freq merge: tables of two normalizers", "freq merge {table} {lower_table} --out {work}/m.freq", "normalizer"),
    Case("freq merge: a table and its own copy", "freq merge {table} {table_copy} --out {work}/m.freq", "copies"),
    Case("freq merge: tables whose sources overlap", "freq merge {table} {part_table} --out {work}/m.freq", "c.jsonl"),
    Case(
        "score: --resume after the tokenizer gained a normalizer",
        "score {longer} --model {lower_model} --methods loss,zlib --out {resumable} --resume --quiet",
        "normalizer",
    ),
    Case(
        "score: --freq-table of another tokenizer",
        "score {data} {M} --methods dcpdd --freq-table {lower_table} --out {new} --quiet",
        "normalizer",
    ),
    Case("freq info: --tokenizer of another tokenizer", "freq info {table} --tokenizer {lower_model}", "normalizer"),
    Case(
        "freq build: a tokenizer with BPE dropout",
        "freq build {corpus_dir} --tokenizer {dropout_model} --out {work}/d.freq --quiet",
        "dropout",
    ),
    Case(
        "score: a tokenizer with BPE dropout",
        "score {data} --model {dropout_model} --methods loss --out {new} --quiet",
        "dropout",
    ),
    # ---- corpus formats and parquet (issue 67) ----
    Case(
        "freq build: a folder with .json lines and a .pdf",
        "freq build {formats_dir} --tokenizer {model} --out {work}/f.freq --quiet",
        ".pdf",
        accepted=True,
    ),
    Case(
        "freq build: a symlink loop",
        "freq build {loop_dir}/self --tokenizer {model} --out {work}/l.freq --quiet",
        "a loop of links",
    ),
    Case(
        "freq build: raw invalid UTF-8 in JSON lines",
        "freq build {raw_utf8} --tokenizer {model} --out {work}/utf.freq --quiet",
        "UTF-8",
    ),
    Case("score: raw invalid UTF-8 in JSON lines", "score {raw_utf8} {M} --out {new} --quiet", "UTF-8"),
    Case(
        "freq build: invalid UTF-8 in a parquet column",
        "freq build {bad_utf8_parquet} --tokenizer {model} --out {work}/p.freq --quiet",
        "UTF-8",
    ),
    Case("score: invalid UTF-8 in a parquet column", "score {bad_utf8_parquet} {M} --out {new} --quiet", "UTF-8"),
    Case(
        "score: ids of mixed types into parquet",
        "score {mixed_ids} {M} --methods loss --out {work}/o.parquet --quiet",
        "string",
        accepted=True,
    ),
    Case(
        "freq build: --ray at a port nothing listens on",
        "freq build {corpus_dir} --tokenizer {model} --out {work}/r.freq --ray ray://127.0.0.1:{closed_port} --quiet",
        "cannot reach the Ray cluster",
    ),
    # ---- model folders (issue 67) ----
    Case(
        "score: a LoRA adapter without its base",
        "score {data} --model {adapter_alone} --methods loss --out {new} --quiet",
        "no-base",
    ),
]


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class _RanOn(BaseException):
    """A case still running at its time limit (an input accepted that makes the run go on without end)."""


def _stop_running(signum: int, frame: object) -> None:
    raise _RanOn


@dataclass
class _Ran:
    """What one command did: its exit code (None: a traceback), stderr, stdout and the traceback."""

    code: int | None
    err: str
    out: str = ""
    crash: str = ""


def _run(argv: list[str]) -> _Ran:
    """One command in this process, reading an empty standard input. A command still running after CASE_LIMIT_S
    is stopped and counts as exit 0: it took the input without a word."""
    from mia_fast.cli.main import main

    err, out = io.StringIO(), io.StringIO()
    stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(b""))
    previous = signal.signal(signal.SIGALRM, _stop_running)
    signal.setitimer(signal.ITIMER_REAL, CASE_LIMIT_S)
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            return _Ran(main(argv), err.getvalue(), out.getvalue())
        except SystemExit as exc:  # an older main let argparse exit
            return _Ran(int(exc.code or 0), err.getvalue(), out.getvalue())
        except _RanOn:
            return _Ran(0, err.getvalue() + f"(still running after {CASE_LIMIT_S:g} s: stopped)\n", out.getvalue())
        except BaseException:  # noqa: BLE001 - a traceback is the outcome being measured
            return _Ran(None, err.getvalue(), out.getvalue(), traceback.format_exc())
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            sys.stdin = stdin


def _copy_weights(model: str | None, target: Path) -> None:
    """The model's config and weights without its tokenizer files."""
    from mia_fast.pipeline.models import pretrained_source

    source = Path(pretrained_source(model)[0])
    for name in ("config.json", "model.safetensors"):
        shutil.copy(source / name, target / name)


def _tampered_model(
    model: str | None,
    target: Path,
    *,
    renamed: bool = False,
    config: dict | None = None,
    cut_vocabulary: bool = False,
) -> None:
    """A copy of the model directory whose checkpoint's keys are renamed, whose embedding (and config) keeps only its
    first 100 rows, or whose config.json is updated."""
    from safetensors.torch import load_file, save_file

    from mia_fast.pipeline.models import pretrained_source

    shutil.copytree(pretrained_source(model)[0], target)
    if renamed or cut_vocabulary:
        state = load_file(target / "model.safetensors")
        if renamed:
            state = {key.replace("model.", "decoder."): tensor for key, tensor in state.items()}
        if cut_vocabulary:
            state = {key: t[:100].clone() if "embed" in key or "lm_head" in key else t for key, t in state.items()}
            config = {**(config or {}), "vocab_size": 100}
        save_file(state, target / "model.safetensors", metadata={"format": "pt"})
    if config:
        settings = json.loads((target / "config.json").read_text())
        (target / "config.json").write_text(json.dumps(settings | config))


def _must(argv: list[str]) -> None:
    ran = _run(argv)
    if ran.code != 0:
        raise SystemExit(f"preparing the cases failed: mia-fast {' '.join(argv)}\n{ran.err}{ran.crash}")


def prepare(work: Path, model: str | None) -> dict[str, str]:
    """The files the cases use, made with the package's own commands; returns their names."""
    rows = [
        {"id": f"r{i}", "text": f"the quick brown fox number {i} jumps over the lazy dog", "label": i % 2}
        for i in range(8)
    ]
    places = {"work": str(work), "model": model or "default"}
    data = _write_jsonl(work / "data.jsonl", rows)
    files = {
        "data": data,
        "nolabels": _write_jsonl(work / "nolabels.jsonl", [{"text": r["text"]} for r in rows]),
        "oneclass": _write_jsonl(work / "oneclass.jsonl", [{**r, "label": 1} for r in rows]),
        "other": _write_jsonl(work / "other.jsonl", [{**r, "text": r["text"].upper()} for r in rows]),
        "short": _write_jsonl(work / "short.jsonl", rows[:3]),
        "suspect": _write_jsonl(work / "suspect.jsonl", [{"text": f"suspect text {i} of the set"} for i in range(12)]),
        "overlap": _write_jsonl(
            work / "overlap.jsonl", [{"text": f"suspect text {i} of the set"} for i in range(6, 18)]
        ),
        "notext": _write_jsonl(work / "notext.jsonl", [{"body": "x"}]),
        "numtext": _write_jsonl(work / "numtext.jsonl", [{"text": 5}]),
        "strayid": _write_jsonl(work / "strayid.jsonl", [{"id": 1, "text": "a b"}, {"text": "c d"}]),
        "empty": work / "empty.jsonl",
        "malformed": work / "malformed.jsonl",
        "badgz": work / "bad.jsonl.gz",
        "latin1": work / "latin1.csv",
        "badparquet": work / "bad.parquet",
        "jsonobject": work / "object.json",
        "surrogate": work / "surrogate.jsonl",
        "text_file": work / "notes.txt",
        "text_npz": work / "text.npz",
        "object_npz": work / "object.npz",
        "prefix": work / "prefix.txt",
        "corpus_dir": work / "corpus",
        "empty_corpus": work / "empty-corpus",
        "notokenizer": work / "no-tokenizer",
        "truncated_gguf": work / "truncated.gguf",
        "link": work / "link.jsonl",
        "dotted": work / "sub" / ".." / "data.jsonl",
        "new": work / "new.jsonl",
    }
    files["empty"].write_text("")
    files["malformed"].write_text(json.dumps(rows[0]) + '\n{"text": "broken\n')
    files["badgz"].write_bytes(gzip.compress(b'{"text": "a"}\n')[:-8] + b"garbage!")
    files["latin1"].write_bytes("text\ncaf\xe9\n".encode("latin-1"))
    files["badparquet"].write_bytes(b"PAR1 this is not parquet PAR1")
    files["jsonobject"].write_text('{"text": "a"}')
    files["surrogate"].write_text('{"text": "fine"}\n{"text": "half \\ud800 a pair"}\n')
    files["text_file"].write_text("some notes\n")
    files["text_npz"].write_text("not an npz\n")
    files["prefix"].write_text("a prefix text\n")
    (work / "sub").mkdir()
    files["link"].symlink_to(data)
    _write_jsonl(files["corpus_dir"] / "c.jsonl", [{"text": f"corpus text number {i} of many"} for i in range(30)])
    files["empty_corpus"].mkdir()
    (files["empty_corpus"] / "c.jsonl").write_text("")
    files["notokenizer"].mkdir()
    _copy_weights(model, files["notokenizer"])
    _tampered_model(model, work / "renamed-keys", renamed=True)
    _tampered_model(model, work / "small-vocabulary", renamed=False, cut_vocabulary=True)
    _write_jsonl(
        work / "blank.jsonl", [{"text": " " if i % 2 else f"a text number {i}", "label": i % 2} for i in range(8)]
    )
    places["blank_members"] = str(work / "blank.jsonl")
    _tampered_model(
        model, work / "other-type", config={"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"]}
    )
    _tampered_model(model, work / "other-shapes", config={"intermediate_size": 40})
    files["truncated_gguf"].write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 64)
    import numpy as np

    np.savez(files["object_npz"], logp=np.array([{"a": 1}], dtype=object))
    places.update({name: str(path) for name, path in files.items()})
    model_options = [] if model is None else ["--model", model]

    table, bad_table = work / "c.freq", work / "bad.freq"
    _must(["freq", "build", str(files["corpus_dir"]), "--tokenizer", places["model"], "--out", str(table), "--quiet"])
    flipped = bytearray(table.read_bytes())
    flipped[len(flipped) // 2] ^= 1
    bad_table.write_bytes(bytes(flipped))
    scores, cache = work / "scores.jsonl", work / "cache"
    _must(
        [
            "score",
            str(data),
            *model_options,
            "--methods",
            "loss,zlib",
            "--out",
            str(scores),
            "--quiet",
            "--stats-cache",
            str(cache),
        ]
    )
    for name in ("tampered", "orphan"):
        shutil.copy(scores, work / f"{name}.jsonl")
    manifest = work / "tampered.jsonl.manifest.json"
    if scores.with_name("scores.jsonl.manifest.json").is_file():  # (an older mia-fast wrote none)
        shutil.copy(scores.with_name("scores.jsonl.manifest.json"), manifest)
        manifest.write_text(manifest.read_text().replace('"prepend_start": true', '"prepend_start": false'))
    threshold = work / "threshold.json"
    _must(["calibrate", str(data), *model_options, "--method", "loss", "--out", str(threshold), "--quiet"])
    tampered_threshold = work / "tampered-threshold.json"
    content = json.loads(threshold.read_text())
    content["value"] = -1e9
    tampered_threshold.write_text(json.dumps(content))
    from mia_fast import Detector

    stats = work / "stats.npz"
    Detector(model).token_stats([r["text"] for r in rows]).save(stats)
    tampered_stats = work / "tampered-stats.npz"
    with np.load(stats) as saved:
        arrays = dict(saved)
    arrays["logp"] = arrays["logp"] + 1
    np.savez(tampered_stats, **arrays)
    places.update(_round_two(work, places, scores, table, cache))
    places.update(_round_three(work, places))
    places.update(_round_four(work, places, model, scores))
    places.update(
        scores=str(scores),
        cache=str(cache),
        table=str(table),
        bad_table=str(bad_table),
        threshold=str(threshold),
        tampered_threshold=str(tampered_threshold),
        stats=str(stats),
        tampered_stats=str(tampered_stats),
        tampered=str(work / "tampered.jsonl"),
        orphan=str(work / "orphan.jsonl"),
    )
    return places


def _round_two(work: Path, places: dict[str, str], scores: Path, table: Path, cache: Path) -> dict[str, str]:
    """The files of the output-gate, resume and input cases: the user's own files where the tool's side files go,
    stages whose rows were edited, cut or orphaned, and doubtful inputs."""
    from mia_fast.data.artefacts import read_checked_json, write_checked_json
    from mia_fast.data.outputs import MANIFEST_KIND, manifest_path, stage_path

    rows = [json.loads(line) for line in Path(places["data"]).read_text().splitlines()]
    made = {
        "corpus_file": Path(places["corpus_dir"]) / "c.jsonl",
        "table_copy": work / "copy.freq",
        "user_report": work / "user-report",
        "folder_out": work / "folder.jsonl",
        "dangling": work / "dangling.jsonl",
        "user_lock": work / "locked.jsonl",
        "user_stage": work / "staged.jsonl",
        "user_manifest": work / "manifested.jsonl",
        "user_checkpoints": work / "u.freq",
        "dupids": _write_jsonl(work / "dupids.jsonl", [*rows, {**rows[1], "text": "another text"}]),
        "contradictory": _write_jsonl(
            work / "contradictory.jsonl", [*rows, {**rows[0], "label": 1 - rows[0]["label"]}]
        ),
        "fifo": work.with_name(work.name + "-fifo.jsonl"),
        "self_run": work / "self-run.jsonl",
    }
    made["self_run"].write_text(
        f'command = "score"\n[data]\ndata = "{places["data"]}"\n[methods]\nnames = ["loss"]\n'
        f'[output]\nout = "{made["self_run"]}"\n'
    )
    shutil.copy(table, made["table_copy"])
    made["user_report"].mkdir()
    (made["user_report"] / "metrics.json").write_text('{"mine": true}\n')
    (made["user_report"] / "report.md").write_text("# my own report\n")
    made["folder_out"].mkdir()
    made["dangling"].symlink_to(work / "gone.jsonl")
    Path(f"{made['user_lock']}.lock").write_text("my shopping list\n")
    stage_path(made["user_stage"]).mkdir()
    (stage_path(made["user_stage"]) / "thesis.tex").write_text("chapter one\n")
    manifest_path(made["user_manifest"]).write_text('{"my": "settings"}\n')
    Path(f"{made['user_checkpoints']}.partial").mkdir()
    (Path(f"{made['user_checkpoints']}.partial") / "keep.txt").write_text("mine\n")
    if not made["fifo"].exists():
        os.mkfifo(made["fifo"])  # beside the work folder, which is copied (a FIFO would block the copy)
    recorded = read_checked_json(manifest_path(scores), MANIFEST_KIND, "a scoring run")
    for name in ("stage_edited", "stage_cut", "stage_orphan"):
        made[name] = work / f"{name}.jsonl"
        stage = stage_path(made[name])
        stage.mkdir()
        shutil.copy(scores, stage / "rows.jsonl")
        write_checked_json(stage / "manifest.json", {**recorded, "complete": False}, MANIFEST_KIND)
    edited_row = re.sub(
        rb'("loss": -?\d+\.\d)(\d)', lambda m: m[1] + (b"7" if m[2] != b"7" else b"8"), scores.read_bytes(), count=1
    )
    (stage_path(made["stage_edited"]) / "rows.jsonl").write_bytes(edited_row)
    cut = stage_path(made["stage_cut"]) / "rows.jsonl"
    cut.write_bytes(cut.read_bytes()[:-30])
    (stage_path(made["stage_orphan"]) / "manifest.json").unlink()
    made["edited"] = work / "edited.jsonl"
    made["edited"].write_bytes(edited_row)
    shutil.copy(manifest_path(scores), manifest_path(made["edited"]))
    made["damaged_cache"] = work / "damaged-cache"
    shutil.copytree(cache, made["damaged_cache"])
    shard = next(made["damaged_cache"].glob("*/*.arrow"))
    flipped = bytearray(shard.read_bytes())
    flipped[len(flipped) // 2] ^= 1
    shard.write_bytes(bytes(flipped))
    return {name: str(path) for name, path in made.items()}


def _closed_port(family: int = socket.AF_INET, host: str = "127.0.0.1") -> int:
    """A port nothing listens on (bound for a moment, then let go)."""
    with socket.socket(family) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _round_three(work: Path, places: dict[str, str]) -> dict[str, str]:
    """The files of the run-file, URL and duplicate-column cases."""
    data, new = places["data"], places["new"]
    score = f'command = "score"\n[data]\ndata = "{data}"\n'
    runs = {
        "deep_toml": score.replace("[data]", "[data]\ntext_field = " + "[" * 5000 + "]" * 5000),
        "resume_toml": score + f'[output]\nout = "{new}"\nresume = true\n',
        "foo_toml": score + "[foo.bar]\nx = 1\n",
        "eval_section_toml": score + "[eval]\nbootstrap = 10\n",
        "other_method_toml": score
        + f'[methods]\nnames = ["loss"]\n[methods.dcpdd]\na = 0.01\n[output]\nout = "{new}"\n',
        "long_key_toml": score + "k" * 500_000 + " = 1\n",
        "pasted_key_toml": score
        + f'[server]\nserver = "http://127.0.0.1:9"\nserver_model = "m"\napi_key_env = "{KEY}"\n',
    }
    made = {name: work / f"{name.removesuffix('_toml')}.toml" for name in runs}
    for name, text in runs.items():
        made[name].write_text(text)
    made["loop_toml"] = work / "loop.toml"
    made["loop_toml"].symlink_to(made["loop_toml"])
    # Beside the work folder, which is hashed before and after every case.
    made["huge_toml"] = work.with_name(work.name + "-huge.toml")
    made["huge_toml"].write_bytes(score.encode() + b"[data]\ntext_field = '" + b"f" * 50_000_000 + b"'\n")
    rows = "".join(f"text {i} a,{i % 2},text {i} b\n" for i in range(8))
    for name, header in (("dup_text_csv", "text,label,text"), ("dup_label_csv", "text,label,label")):
        made[name] = work / f"{name.removesuffix('_csv')}.csv"
        made[name].write_text(header + "\n" + rows)
    import pyarrow as pa
    import pyarrow.parquet as pq

    made["dup_key_jsonl"] = work / "dup_key.jsonl"
    made["dup_key_jsonl"].write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 0, "text": "c"}\n')
    made["dup_parquet"] = work / "dup.parquet"
    texts = pa.array([f"text {i}" for i in range(8)])
    pq.write_table(pa.Table.from_arrays([texts, texts], names=["text", "text"]), made["dup_parquet"])
    ports = {"closed_port": str(_closed_port()), "closed_port6": str(_closed_port(socket.AF_INET6, "::1"))}
    return {**{name: str(path) for name, path in made.items()}, **ports}


def _with_tokenizer(model: str | None, target: Path, change) -> Path:
    """A copy of the model directory whose tokenizer.json ``change`` edits (a dict, in place)."""
    _tampered_model(model, target)
    spec = json.loads((target / "tokenizer.json").read_text(encoding="utf-8"))
    change(spec)
    (target / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return target


def _round_four(work: Path, places: dict[str, str], model: str | None, scores: Path) -> dict[str, str]:
    """The files of issue 67's cases: the model with a Lowercase normalizer and with BPE dropout, a table counted by
    each tokenizer and one whose source overlaps another's, corpora the readers must not skip or misread, a scores
    run to resume with the other tokenizer, ids of mixed types, a LoRA adapter without its base."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lower = _with_tokenizer(model, work / "lower-model", lambda spec: spec.update(normalizer={"type": "Lowercase"}))
    dropout = _with_tokenizer(model, work / "dropout-model", lambda spec: spec["model"].update(dropout=0.1))
    corpus = places["corpus_dir"]
    made = {"lower_model": lower, "dropout_model": dropout, "lower_table": work / "lower.freq"}
    _must(["freq", "build", corpus, "--tokenizer", str(lower), "--out", str(made["lower_table"]), "--quiet"])
    made["part_table"], more = work / "part.freq", work / "more.txt"
    more.write_text("another document, counted in one table only\n")
    _must(
        [
            "freq",
            "build",
            f"{corpus}/c.jsonl",
            str(more),
            "--tokenizer",
            places["model"],
            "--out",
            str(made["part_table"]),
            "--quiet",
        ]
    )
    made["resumable"] = work / "resumable.jsonl"
    shutil.copy(scores, made["resumable"])
    shutil.copy(f"{scores}.manifest.json", f"{made['resumable']}.manifest.json")
    rows = Path(places["data"]).read_text(encoding="utf-8")
    made["longer"] = work / "longer.jsonl"  # the scored rows and more: a resume that has rows left to score
    made["longer"].write_text(
        rows
        + "".join(json.dumps({"id": f"more{i}", "text": f"one more text {i}", "label": i % 2}) + "\n" for i in range(4))
    )
    made["formats_dir"] = work / "formats"
    texts = [f"corpus text number {i} of many" for i in range(10)]
    _write_jsonl(made["formats_dir"] / "a.jsonl", [{"text": text} for text in texts])
    _write_jsonl(made["formats_dir"] / "b.json", [{"text": text} for text in texts])
    (made["formats_dir"] / "notes.pdf").write_bytes(b"%PDF-1.4 not a corpus")
    made["loop_dir"] = work / "loop-corpus"
    made["loop_dir"].mkdir()
    (made["loop_dir"] / "self").symlink_to(made["loop_dir"] / "self")
    made["raw_utf8"] = work / "raw-utf8.jsonl"
    made["raw_utf8"].write_bytes(b'{"text": "fine"}\n{"text": "half \xed\xa0\x80 a pair"}\n')
    made["bad_utf8_parquet"] = work / "bad-utf8.parquet"
    raw = pa.array([b"fine text", b"bad \xff\xfe bytes"], type=pa.binary())
    # A string column built from its buffers is not validated: as a writer that trusted its input would write it.
    pq.write_table(
        pa.table({"text": pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())}), made["bad_utf8_parquet"]
    )
    ids = [1, "1", 2.5, None, True, {"a": 1}]
    made["mixed_ids"] = _write_jsonl(
        work / "mixed-ids.jsonl", [{"id": i, "text": f"a text {n}"} for n, i in enumerate(ids)]
    )
    made["adapter_alone"] = work / "adapter"
    made["adapter_alone"].mkdir()
    (made["adapter_alone"] / "adapter_config.json").write_text(
        json.dumps(
            {
                "peft_type": "LORA",
                "base_model_name_or_path": str(work / "no-base"),
                "r": 2,
                "target_modules": ["q_proj"],
            }
        )
    )
    (made["adapter_alone"] / "adapter_model.safetensors").write_bytes(b"")
    return {name: str(path) for name, path in made.items()}


def _faulty_server():
    """``scripts/faulty_server.py``, loaded from beside this script (it is not a package)."""
    path = Path(__file__).with_name("faulty_server.py")
    spec = importlib.util.spec_from_file_location("faulty_server", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _leaks_key(printed: str, before: dict[str, str], work: Path) -> bool:
    """Whether the key is in a line printed or a file the case wrote (files that held it before are the user's)."""
    if KEY in printed:
        return True
    files = (p for p in work.rglob("*") if p.is_file() and not p.is_symlink())
    return any(KEY.encode() in p.read_bytes() for p in files if str(p.relative_to(work)) not in before)


def judge(case: Case, ran: _Ran, before: dict, after: dict, places: dict) -> str:
    code, err = ran.code, ran.err
    lines = [line for line in err.strip().splitlines() if line]
    if ran.crash or "Traceback" in err:
        return "crash"
    if _leaks_key(err + ran.out, before, Path(places["work"])):
        return "security"
    if any(after.get(path) != digest for path, digest in before.items()):
        return "harmful"
    expected = case.expect.format(**places)
    if case.accepted:
        warned = [line for line in lines if line.startswith("mia-fast: warning:") and expected in line]
        return "accepted" if code == 0 and warned else "unclear"
    errors = [line for line in lines if line.startswith("mia-fast: error:")]
    clear = code == 2 and len(lines) == 1 and errors and expected in errors[0]
    if code == 0:
        return "silent"
    if set(after) - set(before):
        return "litter"
    return "refused" if clear else "unclear"


def run_cases(model: str | None, work: Path, cases: list[Case] = CASES) -> list[dict]:
    """Every case on files prepared in ``work``; one dict per case: name, outcome, exit code, stderr, seconds."""
    places = prepare(work, model)
    pristine = work.with_name(work.name + "-pristine")
    shutil.copytree(work, pristine, symlinks=True)
    model_options = "" if model is None else f"--model {model}"
    servers = contextlib.ExitStack()
    serving = _faulty_server().serving
    for behaviour in sorted({b for case in cases for b in re.findall(r"\{server_(\w+)\}", case.argv)}):
        places[f"server_{behaviour}"] = servers.enter_context(serving(behaviour, drip_s=0.3))
    servers.enter_context(_key_in_environment())
    with servers:
        results = _run_each(cases, places, model_options, work, pristine)
    shutil.rmtree(pristine)
    Path(places["fifo"]).unlink(missing_ok=True)
    Path(places["huge_toml"]).unlink(missing_ok=True)
    return results


@contextlib.contextmanager
def _key_in_environment():
    before = os.environ.get(KEY_VARIABLE)
    os.environ[KEY_VARIABLE] = KEY
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(KEY_VARIABLE, None)
        else:
            os.environ[KEY_VARIABLE] = before


def _run_each(cases: list[Case], places: dict, model_options: str, work: Path, pristine: Path) -> list[dict]:
    results = []
    for case in cases:
        argv = [part.format(**places, M="") for part in case.argv.replace("{M}", model_options).split()]
        before = _digests(work)
        started = time.perf_counter()
        ran = _run(argv)
        seconds = time.perf_counter() - started
        after = _digests(work)
        outcome = judge(case, ran, before, after, places)
        if after != before:  # each case starts from the prepared files, whatever the one before did
            shutil.rmtree(work)
            shutil.copytree(pristine, work, symlinks=True)
        results.append(
            {
                "case": case.name,
                "outcome": outcome,
                "exit": ran.code,
                "stderr": (ran.err + ran.crash).strip()[-2000:],
                "seconds": round(seconds, 2),
            }
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model directory (default: the built-in SmolLM2-135M)")
    parser.add_argument("--json", help="write every case's outcome and the counts here")
    parser.add_argument("--match", default="", help="run only the cases whose name this regular expression finds")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mia-fast-bad-inputs-") as work:
        results = run_cases(args.model, Path(work), [case for case in CASES if re.search(args.match, case.name)])
    for result in results:
        first = result["stderr"].splitlines()[-1] if result["stderr"] else ""
        print(f"{result['outcome']:9} {result['case']:48} {first[:150]}")
    counts = Counter(result["outcome"] for result in results)
    print("\n| outcome | cases |\n|---|---|")
    for outcome in OUTCOMES:
        print(f"| {outcome} | {counts.get(outcome, 0)} |")
    print(f"| **all** | {len(results)} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": dict(counts), "cases": results}, indent=1) + "\n")
    return 0 if counts.get("refused", 0) + counts.get("accepted", 0) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
