"""The jobs (dub, synth, inspect) as stage sequences, engine loading, doctor, download."""
