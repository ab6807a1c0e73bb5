"""The papers: their published numbers (`papers.published`, one module per paper), the model that
prices each paper's setups from the architectures and one latency model of its GPU (`MODELS`: each
paper's `MODEL`, a `papers.calibration.PaperModel`), the fit of that model to the published cells
(`papers.calibration`), the bundled Profiles it builds (`papers.build`; `python -m
experiments.paper_profiles`) and the papers' numbers recomputed, held out by table and by model size
(`papers.reproduce`, `papers.heldout`; `python -m experiments.reproduce`), with the papers' own
configuration choices beside the sweep's (`papers.choices`)."""
from papers.published import PAPERS, Record, records, table, tables, to_rows, value
from papers import coral, glide, kangaroo, lookahead, mcsd, mistral  # noqa: F401  (mistral registers its records)

MODELS = {m.MODEL.paper: m.MODEL for m in (glide, mcsd, lookahead, kangaroo, coral)}
k_config = mcsd.k_config
mcsd_tau_rows = mcsd.tau_rows

__all__ = ["PAPERS", "Record", "MODELS", "records", "value", "table", "tables", "to_rows", "k_config", "mcsd_tau_rows"]
