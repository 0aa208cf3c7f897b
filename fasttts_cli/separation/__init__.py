"""Source separation: the dialogue and the music-and-effects of a video's audio (Demucs v4 htdemucs).

`model` (where the weights are, demucs' own loader, random-weight stand-ins), `blocks` (block geometry and
cross-fades), `stems` (block-by-block separation with resume, the content-addressed stems cache), `fetch`
(`fasttts download --separation`).
"""
