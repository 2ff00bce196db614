import matplotlib

# Tests draw figures without a display. Select the backend in this process only: an MPLBACKEND
# environment variable would leak into the kernels that nbval starts and change the notebooks' outputs.
matplotlib.use("Agg")
