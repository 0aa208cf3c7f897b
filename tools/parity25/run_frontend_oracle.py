#!/usr/bin/env python3
"""Weight-free oracle for the IndexTTS-2.5 text front end (delta spec section 13.2, option (b)).

Runs the ORIGINAL front-end code of index-tts (a `git archive` of the mirror) on the corpus in
`frontend_corpus.py` and writes every intermediate string, the segments and the ids to
tests/data/parity25/frontend.json, which tests/test_parity25_frontend.py compares ours against. It also
runs the number corpus (tools/frontend/numbers_corpus.py, with tools/frontend/oracle_numbers.py) through
the original 2.5 chain (tests/data/parity25/numbers25.json) and the original IndexTTS-2 TextTokenizer on
the v2 parity bpe.model (tests/data/frontend/numbers2.json, read by tests/test_frontend_numbers.py).

    python3 tools/parity25/run_frontend_oracle.py            # defaults below; a few minutes

The driver (any Python 3.11, stdlib only) makes a separate virtual environment under /tmp with only what
the original front end needs from PyPI (PACKAGES: tiktoken, fugashi, unidic-lite, sentencepiece, and
WeTextProcessing + pynini at the versions of the original's uv.lock; no NeMo, no torch), and runs
itself inside it as the worker twice, under two PYTHONHASHSEED values: the outputs must agree (the
original collects pinyin and names through sets, whose order follows string hashing).

What the worker runs verbatim from the original:
- indextts/utils/front.py TextNormalizer (char map, normalize with its pre/post-processing),
  indextts/utils/tokenizer.py get_tokenizer/get_encoding/lang_to_token, indextts/utils/ja_g2p.py
  JapaneseG2PProcessor(g2p_ratio=0) on real fugashi + unidic-lite, indextts/utils/nemo_tn.py
  (its NeMo import fails, so ja/es pass unchanged as in the official environment);
- from infer_v2_5.py, compiled from the file's own syntax tree: PRONUNCIATION_ANNOTATION_PATTERN,
  is_kana, apply_pronunciation_annotations, IndexTTS2.SPLIT_PROTECTED_PATTERN / _token_len /
  _split_atomic_pieces / split_text_by_tokens, and the statements of infer_generator from
  `lang_prefix = ...` to `lang = torch.LongTensor(...)`, executed one by one to record `text` after each;
- from gpt/model_v2.py prepare_gpt_inputs, the four statements that strip start/stop ids and re-add them.

What is stubbed (STUBS below), and why it cannot change the outputs:
WeTextProcessing is the real one (`TextNormalizer.load()` as on Linux). Its Chinese grammar is built by
`load()` into `indextts/utils/tagger_cache` of the extracted tree (143 s, 6.5 GB peak memory); the folder
is kept in `--tagger-cache` (default: inside the venv) and copied in before each run, so only the first
run builds it, as a second run of the original would find it.
- `whisper.tokenizer.Tokenizer`: stores encoding/num_languages/language/task; `encode(text, **kw)` is
  `encoding.encode(text, **kw)` and `decode` likewise, exactly what openai-whisper's dataclass does.
- `torch`, `torchaudio`, `transformers`: imported at module level by common.py / front.py /
  tokenizer.py but unused by the front end (audio helpers, Qwen tokenizer);
  the stubs only make the imports succeed. In the executed infer/prepare statements, `torch.IntTensor`,
  `.unsqueeze(0)`, `.to(device)`, `F.pad` and the masking are list operations on the same Python ints
  (the int32 range is asserted), so the ids are unchanged.
- `self.gpt.text_pos_embedding.emb.num_embeddings` (the only model attribute the split reads) is
  max_text_tokens + 2, as UnifiedVoice builds it.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_MIRROR = Path("/work/.mirror/index-tts+index-tts/repo")
DEFAULT_TIKTOKEN = REPO / "tests/data/parity25/multilingual_zh_ja_yue_char_del.tiktoken"
DEFAULT_OUT = REPO / "tests/data/parity25/frontend.json"
DEFAULT_VENV = Path("/tmp/fasttts-oracle25-venv")
PACKAGES = (
    "tiktoken==0.14.0", "fugashi==1.5.2", "unidic-lite==1.0.8", "sentencepiece==0.2.3",
    "WeTextProcessing==1.0.4.1", "pynini==2.1.6",
)  # fmt: skip
FRONTEND = REPO / "tools/frontend"
DEFAULT_BPE = REPO / "tests/data/frontend/bpe.model"
DEFAULT_OUT25_NUMBERS = REPO / "tests/data/parity25/numbers25.json"
DEFAULT_OUT2_NUMBERS = REPO / "tests/data/frontend/numbers2.json"
HASH_SEEDS = ("0", "987654321")
START_TEXT_TOKEN, STOP_TEXT_TOKEN = 0, 1  # UnifiedVoice's defaults (the 2.5 config values are unknown)

STUBS = {
    "whisper.tokenizer": "Tokenizer(encoding, num_languages, language, task); encode/decode = the encoding's",
    "torch, torchaudio": "imports of common.py/tokenizer.py; IntTensor, LongTensor, F.pad: on lists",
    "transformers": "module-level import (Qwen tokenizer), unused",
}

# (first line of the statement as ast.unparse prints it, the step recorded after it or None)
INFER_STATEMENTS = [
    ("lang_prefix = f'<|{lang.lower()}|> '", None),
    ("text = self.text_process.clean_pattern.sub(", "char_mapped"),
    ("if text_normalization:", "normalized"),
    ("if lang.lower() in ['ja', 'zh', 'zhen', 'en']:", None),
    ("if lang.lower() == 'es':", "cased"),
    ("text = apply_pronunciation_annotations(text)", "annotated"),
    ("if lang.lower() == 'ja':", "spaced"),
    ("text = re.sub(", "special_upper"),
    ("segments = self.split_text_by_tokens(", None),
    ("segments_count = len(segments)", None),
    ("segment_tokens = []", None),
    ("for seg_text in segments:", None),
    ("lang = torch.LongTensor([lang_to_token(lang)])", None),
]
PREPARE_STATEMENTS = [
    "valid_mask = (text_inputs[i] != self.stop_text_token) & (text_inputs[i] != self.start_text_token)",
    "text_input = text_inputs[i][valid_mask]",
    "text_input = F.pad(text_input, (1, 0), value=self.start_text_token)",
    "text_input = F.pad(text_input, (0, 1), value=self.stop_text_token)",
]


# ---------------------------------------------------------------------------------------------- worker


class _T:
    """Just enough of a torch tensor of ints for the executed statements: nested lists."""

    def __init__(self, data: list) -> None:
        self.data = data

    def unsqueeze(self, dim: int) -> _T:
        assert dim == 0
        return _T([self.data])

    def to(self, device: object) -> _T:
        return self

    def __getitem__(self, key: object) -> object:
        if isinstance(key, _T):  # boolean mask on a 1-D tensor
            assert len(key.data) == len(self.data)
            return _T([x for x, keep in zip(self.data, key.data, strict=True) if keep])
        value = self.data[key]  # type: ignore[index]
        return _T(value) if isinstance(value, list) else value

    def __ne__(self, other: object) -> _T:  # type: ignore[override]
        return _T([x != other for x in self.data])

    def __and__(self, other: _T) -> _T:
        return _T([a and b for a, b in zip(self.data, other.data, strict=True)])


def _pad(t: _T, pad: tuple[int, int], value: int) -> _T:
    assert pad in ((0, 1), (1, 0))

    def row(r: list) -> list:
        return [value, *r] if pad == (1, 0) else [*r, value]

    return _T([row(r) for r in t.data] if t.data and isinstance(t.data[0], list) else row(t.data))


def _int_tensor(values: list[int]) -> _T:
    assert all(isinstance(v, int) and -(2**31) <= v < 2**31 for v in values), "not int32"
    return _T(list(values))


def _install_stubs() -> types.SimpleNamespace:
    def module(name: str, **attrs: object) -> types.ModuleType:
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    class Unused:
        def __init__(self, *a: object, **k: object) -> None:
            raise RuntimeError(f"{type(self).__name__} is a stub: the front end must not use it")

        @classmethod
        def from_pretrained(cls, *a: object, **k: object) -> None:
            raise RuntimeError("stub")

    class Tokenizer:  # whisper.tokenizer.Tokenizer, the fields and the two methods inference uses
        def __init__(self, encoding: object, num_languages: int = 99, language=None, task=None) -> None:
            self.encoding, self.num_languages = encoding, num_languages
            self.language, self.task = language, task

        def encode(self, text: str, **kwargs: object) -> list[int]:
            return self.encoding.encode(text, **kwargs)  # type: ignore[attr-defined]

        def decode(self, token_ids: list[int], **kwargs: object) -> str:
            return self.encoding.decode(token_ids, **kwargs)  # type: ignore[attr-defined]

    torch = module("torch", Tensor=type("Tensor", (), {}), IntTensor=_int_tensor, LongTensor=_int_tensor)
    module("torchaudio")
    module("transformers", AutoTokenizer=Unused)
    module("whisper")
    module("whisper.tokenizer", Tokenizer=Tokenizer)
    return types.SimpleNamespace(torch=torch, F=types.SimpleNamespace(pad=_pad))


def _statements(path: Path, cls_name: str, fn_name: str) -> tuple[ast.Module, list[ast.stmt], ast.ClassDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == fn_name)
    return tree, fn.body, cls


def _first_line(stmt: ast.stmt) -> str:
    return ast.unparse(stmt).splitlines()[0]


def _compile(nodes: list[ast.stmt], path: Path) -> types.CodeType:
    return compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec")


def _load_original(orig: Path) -> types.SimpleNamespace:
    """The original's pieces, compiled from its own files (see the module docstring)."""
    infer = orig / "indextts/infer_v2_5.py"
    tree, body, cls = _statements(infer, "IndexTTS2", "infer_generator")
    wanted = {"PRONUNCIATION_ANNOTATION_PATTERN", "is_kana", "apply_pronunciation_annotations"}
    top = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name in wanted)
        or (isinstance(n, ast.Assign) and any(getattr(t, "id", "") in wanted for t in n.targets))
    ]
    assert len(top) == 3, "infer_v2_5.py: annotation pieces not found"
    module_ns: dict = {"re": __import__("re")}
    exec(_compile(top, infer), module_ns)

    names = {"SPLIT_PROTECTED_PATTERN", "_token_len", "_split_atomic_pieces", "split_text_by_tokens"}
    members = [
        n
        for n in cls.body
        if (isinstance(n, ast.FunctionDef) and n.name in names)
        or (isinstance(n, ast.Assign) and any(getattr(t, "id", "") in names for t in n.targets))
    ]
    assert len(members) == 4, "infer_v2_5.py: split methods not found"
    front_cls = ast.ClassDef(name="OriginalFrontEnd", bases=[], keywords=[], body=members, decorator_list=[])
    ast.fix_missing_locations(front_cls)
    exec(_compile([front_cls], infer), module_ns)

    start = next(i for i, s in enumerate(body) if _first_line(s).startswith("lang_prefix = "))
    block = body[start : start + len(INFER_STATEMENTS)]
    got = [_first_line(s) for s in block]
    for line, (expected, _) in zip(got, INFER_STATEMENTS, strict=True):
        assert line.startswith(expected), f"infer_generator changed: {line!r} is not {expected!r}"
    steps = [(_compile([s], infer), label) for s, (_, label) in zip(block, INFER_STATEMENTS, strict=True)]

    model = orig / "indextts/gpt/model_v2.py"
    _, prep_body, _ = _statements(model, "UnifiedVoice", "prepare_gpt_inputs")
    loop = next(s for s in prep_body if isinstance(s, ast.For))
    prep = loop.body[: len(PREPARE_STATEMENTS)]
    assert [ast.unparse(s) for s in prep] == PREPARE_STATEMENTS, "prepare_gpt_inputs changed"
    return types.SimpleNamespace(ns=module_ns, steps=steps, prepare=_compile(prep, model))


def worker(orig: Path, tiktoken_file: Path, bpe_file: Path, result: Path) -> None:
    import importlib.metadata
    import importlib.util
    import re

    assert importlib.util.find_spec("nemo_text_processing") is None, "NeMo must not be installed"
    assert importlib.util.find_spec("torch") is None, "torch must not be installed (it is stubbed)"
    assert importlib.util.find_spec("tn") is not None, "WeTextProcessing must be installed (PACKAGES)"
    stubs = _install_stubs()
    sys.path.insert(0, str(orig))
    from indextts.utils import common, front, ja_g2p, nemo_tn
    from indextts.utils import tokenizer as tok

    sys.path[:0] = [str(HERE), str(FRONTEND)]
    from frontend_corpus import _case, cases
    from oracle_numbers import v2_cases, v25_cases

    original = _load_original(orig)
    text_process = front.TextNormalizer(enable_glossary=True)
    text_process.load()
    ja = ja_g2p.JapaneseG2PProcessor(g2p_ratio=0)
    tokenizer = tok.get_tokenizer(multilingual=True, model_dir=str(tiktoken_file.parent))

    def run_case(case: dict) -> dict:
        fe = original.ns["OriginalFrontEnd"]()
        capacity = case["max_text_tokens"] + 2
        emb = types.SimpleNamespace(num_embeddings=capacity)
        fe.gpt = types.SimpleNamespace(text_pos_embedding=types.SimpleNamespace(emb=emb))
        fe.tokenizer, fe.text_process, fe.ja_text_process, fe.device = tokenizer, text_process, ja, "cpu"
        text_process.term_glossary = dict(case.get("glossary") or {})
        ns = {
            "self": fe, "text": case["text"], "lang": case["lang"], "re": re, "verbose": False,
            "text_normalization": case["text_normalization"],
            "max_text_tokens_per_segment": case["max_text_tokens_per_segment"],
            "torch": stubs.torch, "F": stubs.F, "print": lambda *a, **k: None,
            "apply_pronunciation_annotations": original.ns["apply_pronunciation_annotations"],
            "nemo_text_normalize": nemo_tn.normalize_text, "lang_to_token": tok.lang_to_token,
        }  # fmt: skip
        expected: dict = {}
        for code, label in original.steps:
            exec(code, ns)
            if label:
                expected[label] = ns["text"]
        expected["prefix"] = ns["lang_prefix"]
        expected["segments"] = ns["segments"]
        expected["segment_ids"] = [t.data[0] for t in ns["segment_tokens"]]
        expected["lang_index"] = ns["lang"].data[0]
        gpt_ids = []
        for seg in ns["segment_tokens"]:
            prep = {"text_inputs": seg, "i": 0, "F": stubs.F, "self": types.SimpleNamespace(
                start_text_token=START_TEXT_TOKEN, stop_text_token=STOP_TEXT_TOKEN)}  # fmt: skip
            exec(original.prepare, prep)
            gpt_ids.append(prep["text_input"].data)
        expected["gpt_ids"] = gpt_ids
        return expected

    out = {case["id"]: run_case(case) for case in cases()}
    numbers25 = v25_cases(_case, run_case)
    text_process.term_glossary = {}  # IndexTTS-2 without a glossary.yaml
    tokenizer2 = front.TextTokenizer(str(bpe_file), text_process)
    numbers2 = v2_cases(tokenizer2, text_process, common.tokenize_by_CJK_char)

    packages = ("tiktoken", "fugashi", "unidic-lite", "regex", "sentencepiece", "WeTextProcessing", "pynini")
    versions = {p: importlib.metadata.version(p) for p in packages}
    dictionary = ja.tagger.dictionary_info[0]
    result.write_text(
        json.dumps(
            {
                "python": platform.python_version(),
                "versions": versions,
                "mecab_dictionary": {"version": dictionary["version"], "size": dictionary["size"]},
                "expected": out,
                "numbers25": numbers25,
                "numbers2": numbers2,
            },
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )


# ---------------------------------------------------------------------------------------------- driver


def _run(cmd: list[str], **kw: object) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout  # type: ignore[call-overload]


def _ensure_venv(venv: Path) -> Path:
    python = venv / "bin/python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)])
        _run([str(python), "-m", "pip", "install", "--quiet", *PACKAGES])
    return python


def _extract(mirror: Path, commit: str, dest: Path) -> list[str]:
    """`indextts/` of the commit, file by file (`git archive` stops at the first blob a partial mirror
    lacks); returns the files that could not be read, none of which the front end imports."""
    listing = _run(["git", "-C", str(mirror), "ls-tree", "-r", "-z", commit, "indextts"]).split("\0")
    missing = []
    for entry in filter(None, listing):
        meta, path = entry.split("\t", 1)
        _mode, kind, sha = meta.split()
        if kind != "blob":
            continue
        blob = subprocess.run(["git", "-C", str(mirror), "cat-file", "blob", sha], capture_output=True)
        if blob.returncode:
            missing.append(path)
            continue
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob.stdout)
    return missing


def _write(out: Path, doc: dict) -> None:
    """One case per line: readable diffs, no indentation bloat."""
    cases = doc["cases"]
    head = json.dumps({k: v for k, v in doc.items() if k != "cases"}, ensure_ascii=False, indent=1)[:-2]
    lines = [json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases]
    out.write_text(head + ',\n "cases": [\n' + ",\n".join(lines) + "\n ]\n}\n", encoding="utf-8")


def _tagger_cache(tree: Path, keep: Path, restore: bool) -> None:
    """Copy the original's Chinese FST cache into the extracted tree, or back out of it."""
    inside = tree / "indextts/utils/tagger_cache"
    src, dst = (keep, inside) if restore else (inside, keep)
    if src.is_dir() and not (dst / "zh_tn_verbalizer.fst").is_file():
        shutil.copytree(src, dst, dirs_exist_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR, help="bare git repo of index-tts")
    ap.add_argument("--tiktoken", type=Path, default=DEFAULT_TIKTOKEN)
    ap.add_argument("--bpe", type=Path, default=DEFAULT_BPE, help="SentencePiece model for IndexTTS-2")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--out-numbers25", type=Path, default=DEFAULT_OUT25_NUMBERS)
    ap.add_argument("--out-numbers2", type=Path, default=DEFAULT_OUT2_NUMBERS)
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--tagger-cache", type=Path, help="built Chinese FSTs (default: in --venv)")
    ap.add_argument("--worker", nargs=2, metavar=("ORIG", "RESULT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(Path(args.worker[0]), args.tiktoken.resolve(), args.bpe.resolve(), Path(args.worker[1]))
        return

    commit = _run(["git", "-C", str(args.mirror), "rev-parse", "HEAD"]).strip()
    python = _ensure_venv(args.venv)
    keep = args.tagger_cache or args.venv / "tagger_cache"
    sys.path.insert(0, str(HERE))
    from frontend_corpus import cases

    with tempfile.TemporaryDirectory(prefix="orig25-") as tmp:
        missing = _extract(args.mirror, commit, Path(tmp))
        runs = []
        for seed in HASH_SEEDS:
            _tagger_cache(Path(tmp), keep, restore=True)
            result = Path(tmp) / f"result-{seed}.json"
            env = {**os.environ, "PYTHONHASHSEED": seed}
            cmd = [str(python), __file__, "--tiktoken", str(args.tiktoken), "--bpe", str(args.bpe)]
            _run([*cmd, "--worker", tmp, str(result)], env=env)
            _tagger_cache(Path(tmp), keep, restore=False)
            runs.append(json.loads(result.read_text(encoding="utf-8")))
    differ = [k for k in runs[0]["expected"] if runs[0]["expected"][k] != runs[1]["expected"][k]]
    for key in ("numbers25", "numbers2"):
        differ += [c["id"] for c, d in zip(runs[0][key], runs[1][key], strict=True) if c != d]
    if differ:
        sys.exit(f"hash-seed dependent cases (drop or change them): {differ}")

    tiktoken_bytes = args.tiktoken.read_bytes()
    made_by = {
        "script": "tools/parity25/run_frontend_oracle.py (corpus: tools/parity25/frontend_corpus.py)",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "original": {"repo": "index-tts/index-tts", "commit": commit, "unreadable_files": missing},
        "python": runs[0]["python"],
        "packages": runs[0]["versions"],
        "mecab_dictionary": runs[0]["mecab_dictionary"],
        "hash_seeds_agreeing": list(HASH_SEEDS),
        "stubs": STUBS,
    }
    doc = {
        "format": "fasttts parity25 frontend 1",
        "made_by": made_by,
        "tokenizer": {
            "file": args.tiktoken.name,
            "sha256": hashlib.sha256(tiktoken_bytes).hexdigest(),
            "ranks": tiktoken_bytes.count(b"\n"),
        },
        "config": {"start_text_token": START_TEXT_TOKEN, "stop_text_token": STOP_TEXT_TOKEN},
        "cases": [{**c, "expected": runs[0]["expected"][c["id"]]} for c in cases()],
    }
    _write(args.out, doc)
    corpus = "corpus: tools/frontend/numbers_corpus.py, oracle_numbers.py"
    numbers_by = {**made_by, "script": f"tools/parity25/run_frontend_oracle.py ({corpus})"}
    _write(args.out_numbers25, {**doc, "made_by": numbers_by, "cases": runs[0]["numbers25"]})
    bpe_bytes = args.bpe.read_bytes()
    doc2 = {
        "format": "fasttts frontend2 numbers 1",
        "made_by": numbers_by,
        "tokenizer": {"file": args.bpe.name, "sha256": hashlib.sha256(bpe_bytes).hexdigest()},
        "cases": runs[0]["numbers2"],
    }
    _write(args.out_numbers2, doc2)
    for out, d in ((args.out, doc), (args.out_numbers25, runs[0]["numbers25"]), (args.out_numbers2, doc2)):
        print(f"{out}: {len(d['cases'] if isinstance(d, dict) else d)} cases from index-tts {commit[:7]}")


if __name__ == "__main__":
    main()
