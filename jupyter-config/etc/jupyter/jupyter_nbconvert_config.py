# `jupyter nbconvert --to notebook` writes the course's stored form: no machine-specific metadata
# (flashmath/_notebook_format.py). Guarded like jupyter_server_config.py.
try:
    from flashmath._notebook_format import preprocess
except Exception as error:  # noqa: BLE001
    print(f"flashmath: notebooks are written as nbconvert writes them ({type(error).__name__}: {error})")
else:
    c.NotebookExporter.preprocessors = [preprocess]  # noqa: F821 - `c` is the config object Jupyter passes
