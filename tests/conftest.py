import os

os.environ.setdefault("MPLBACKEND", "Agg")  # tests draw figures without a display

import matplotlib  # noqa: E402

matplotlib.use("Agg")
