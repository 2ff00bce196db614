# The course's notebooks are saved without machine-specific metadata (flashmath/_notebook_format.py), so opening
# a chapter in JupyterLab leaves the clone's file as it was. Guarded: if the course package cannot be imported
# (being edited, say), JupyterLab still starts and saves, only without this step.
try:
    from flashmath._notebook_format import pre_save_hook
except Exception as error:  # noqa: BLE001
    print(f"flashmath: notebooks are saved as JupyterLab writes them ({type(error).__name__}: {error})")
else:
    c.ContentsManager.pre_save_hook = pre_save_hook  # noqa: F821 - `c` is the config object Jupyter passes
