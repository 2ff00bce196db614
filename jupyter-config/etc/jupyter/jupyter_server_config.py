# The course's notebooks are saved without machine-specific metadata (flashmath/_notebook_format.py), so opening
# a chapter in JupyterLab leaves the clone's file as it was. Guarded: if the course package cannot be imported
# (being edited, say), JupyterLab still starts and saves, only without this step.
#
# The hook is registered on every contents manager (register_pre_save_hook, jupyter_server's API for adding a
# hook), not set as the `ContentsManager.pre_save_hook` trait: jupyter_server validates that trait again whenever
# the configuration is reloaded (traitlets cross-validates it at the end of every config load, and extensions such
# as jupytext build a second contents manager), and each time warns "Overriding existing pre_save_hook" although
# the hook is the same. A subclass of the default manager registers it in __init__, so the manager that jupytext
# derives from it registers it too.
try:
    from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

    from flashmath._notebook_format import pre_save_hook
except Exception as error:  # noqa: BLE001
    print(f"flashmath: notebooks are saved as JupyterLab writes them ({type(error).__name__}: {error})")
else:

    class CourseContentsManager(AsyncLargeFileManager):
        """JupyterLab's default contents manager, saving notebooks in the course's stored form."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            if pre_save_hook not in self._pre_save_hooks:
                self.register_pre_save_hook(pre_save_hook)

    c.ServerApp.contents_manager_class = CourseContentsManager  # noqa: F821 - `c` is the config object Jupyter passes
