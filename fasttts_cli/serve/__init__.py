"""`fasttts serve`: one warm engine behind an OpenAI-compatible speech endpoint (README "Serving")."""
