"""What an engine is: precision presets and the engine folder's manifest."""
