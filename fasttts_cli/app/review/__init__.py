"""The review page: one HTML file per dub that a person opens from disk to check the dub line by line.

`data` turns a work folder's report.json into the page's data (each line's status on the timeline, its
audio files by relative path, the retake command), `envelope` precomputes the original audio's peak
envelope once per source, `page` writes the HTML (the hand-written script and style in `assets/` are
inlined; audio and video are referenced, never inlined). `fasttts dub` calls `write_review` after its
report; `fasttts review WORK_DIR` calls it on an existing work folder without synthesizing anything.
"""

from __future__ import annotations

from fasttts_cli.app.review.page import ReviewPage, review_work_dir, write_review

__all__ = ["ReviewPage", "review_work_dir", "write_review"]
