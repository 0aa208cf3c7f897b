"""IndexTTS-2.5: what differs from IndexTTS-2 (see shared/indextts25-delta.md); builds on `indextts2`."""
