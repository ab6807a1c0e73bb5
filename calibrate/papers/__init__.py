"""One module per paper whose published numbers build bundled Profiles (calibrate.paper_profiles):
each defines MODEL, a calibrate.paper_fit.PaperModel (latency parameters, Profiles, cells)."""
from calibrate.papers import coral, glide, kangaroo, lookahead, mcsd

MODELS = {m.MODEL.paper: m.MODEL for m in (glide, mcsd, lookahead, kangaroo, coral)}
