"""What the local embedder's runtimes are compared with: sentence-transformers' own vectors
for a few texts (`minilm_golden.json`, computed once outside the repo), the calibration
sentences, and the numpy forward pass."""

from __future__ import annotations

import json
from pathlib import Path

from actors.search.embed.embedding import CALIBRATION_FILE

GOLDEN = json.loads((Path(__file__).parent / "minilm_golden.json").read_text())
CALIBRATION = [s for s in CALIBRATION_FILE.read_text().splitlines() if s.strip()]
