"""The Synthesizer contract, engine selection and the draft voice."""
