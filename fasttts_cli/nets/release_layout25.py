"""The files of an IndexTTS-2.5 checkpoint folder (delta §1.1), and telling a 2.5 folder from a v2 one.

    config.yaml (or config_v2_5.yaml)  gpt.pth  s2mel.pth  codec.pth
    multilingual_zh_ja_yue_char_del.tiktoken  wav2vec2bert_stats.pt  feat1.pt  feat2.pt
    hf_cache/{w2v-bert-2.0/, campplus_cn_common.bin, bigvgan/}

2.5 reads no `bpe.model` and no MaskGCT codec; `codec.pth` and the tokenizer have hard-coded names in the
original, the other main files are named by config.yaml as in v2. The auxiliary models sit at fixed
places under hf_cache/ (2.5 has no `aux_paths`), with IndexTTS-2's official names.
"""

from __future__ import annotations

from pathlib import Path

from fasttts_cli.errors import InputError
from fasttts_cli.nets.release_layout import AUX_BY_KEY, MAIN_REPO, AuxModel, repo_folder
from fasttts_cli.nets.tiktoken_ranks import TOKENIZER_FILE

MAIN_REPO25 = "IndexTeam/IndexTTS-2.5"
CODEC_FILE = "codec.pth"
# The README and WebUI load config.yaml, docs/README2.5_ZH.md names config_v2_5.yaml, and an unmerged
# upstream branch looks in configs/ first: any of them, in this order.
CONFIG_NAMES = ("config.yaml", "config_v2_5.yaml", "configs/config_v2_5.yaml")
AUX_MODELS25: tuple[AuxModel, ...] = tuple(AUX_BY_KEY[k] for k in ("w2v_bert", "campplus", "bigvgan"))

MODEL_V2, MODEL_V25 = "indextts2", "indextts2.5"
# files only one of the two releases has
V25_MARKERS = (TOKENIZER_FILE, CODEC_FILE, "config_v2_5.yaml", "configs/config_v2_5.yaml")
V2_MARKERS = ("bpe.model", "hf_cache/" + AUX_BY_KEY["codec"].official)


def find_config25(root: Path) -> Path:
    """The first of CONFIG_NAMES present in `root`; config.yaml (to be named as missing) when none is."""
    for name in CONFIG_NAMES:
        if (root / name).is_file():
            return root / name
    return root / CONFIG_NAMES[0]


def _v2_cache(p: Path) -> bool:
    """A Hugging Face cache layout of IndexTeam/IndexTTS-2 (release_layout.find_layout's hub kinds)."""
    main = repo_folder(MAIN_REPO)
    return (p / main).is_dir() or p.name == main or p.parent.parent.name == main


def detect_model_version(folder: Path | str) -> str:
    """ "indextts2" or "indextts2.5", from the files the folder holds (V2_MARKERS / V25_MARKERS); a v2
    Hugging Face cache counts as v2. InputError when the folder has both kinds, or neither."""
    p = Path(folder).expanduser()
    if not p.is_dir():
        raise InputError(p, "checkpoint directory not found")
    v25 = [n for n in V25_MARKERS if (p / n).is_file()]
    v2 = [n for n in V2_MARKERS if (p / n).is_file()]
    if v25 and v2:
        raise InputError(
            p, f"holds files of both IndexTTS-2 ({v2[0]}) and IndexTTS-2.5 ({v25[0]}): which model is it?"
        )
    if v25:
        return MODEL_V25
    if v2 or _v2_cache(p):
        return MODEL_V2
    raise InputError(
        p,
        f"neither an IndexTTS-2 checkpoint (no {V2_MARKERS[0]}) nor an IndexTTS-2.5 one "
        f"(no {TOKENIZER_FILE} or {CODEC_FILE})",
    )
