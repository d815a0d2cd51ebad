"""Run by every code-interpreter kernel as it starts (IPKernelApp.exec_files, in the user's
namespace, so everything here is deleted at the end): a pandas DataFrame also displays as
E2B's `e2b/data` (its columns as lists, timestamps in ISO form), which the SDK gives as
`Result.data`, and a matplotlib figure as E2B's `e2b/chart` (interpreter_charts.py, beside this
file), the SDK's `Result.chart`. Only IPython's formatter API is used; pandas and matplotlib are
looked at only if the cell has imported them already, so other results cost nothing. A PIL
image's show() and save() display it, as in E2B's kernels.
"""

# No `from __future__` import: it would leave a name in the user's namespace.


def _hutch_install_formatters() -> None:
    import importlib.util
    import os
    import sys
    from typing import Any

    from IPython import get_ipython  # type: ignore[import-not-found]
    from IPython.core.formatters import BaseFormatter  # type: ignore[import-not-found]
    from traitlets import ObjectName, Unicode  # type: ignore[import-not-found]

    # interpreter_charts.py, beside this file (IPython runs it with no __file__, but its code has
    # the path): loaded by its path and kept out of sys.modules, so no name of the user's is taken
    here = os.path.dirname(sys._getframe().f_code.co_filename)
    spec = importlib.util.spec_from_file_location("_hutch_charts", os.path.join(here, "interpreter_charts.py"))
    assert spec is not None and spec.loader is not None
    charts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(charts)

    class ColumnsFormatter(BaseFormatter):  # type: ignore[misc]
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict,)

        def __call__(self, obj: Any) -> Any:
            pandas = sys.modules.get("pandas")
            if pandas is None or not isinstance(obj, pandas.DataFrame):
                return super().__call__(obj)
            columns = obj.to_dict(orient="list")
            return {str(name): [v.isoformat() if isinstance(v, pandas.Timestamp) else v for v in values]
                    for name, values in columns.items()}

    class ChartFormatter(BaseFormatter):  # type: ignore[misc]
        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict,)

        def __call__(self, obj: Any) -> Any:
            figure = sys.modules.get("matplotlib.figure")
            if figure is None or not isinstance(obj, figure.Figure):
                return super().__call__(obj)
            return charts.figure_chart(obj)

    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["e2b/data"] = ColumnsFormatter(parent=shell.display_formatter)
        shell.display_formatter.formatters["e2b/chart"] = ChartFormatter(parent=shell.display_formatter)




def _hutch_display_images() -> None:
    """As E2B's kernels: a PIL image's show(), and its save() to a path, display it (a box has no
    image viewer), so the image comes back as a PNG result."""
    import os
    from typing import Any

    try:
        from PIL.Image import Image  # type: ignore[import-not-found]
    except ImportError:
        return
    from IPython.display import display  # type: ignore[import-not-found]

    save = Image.save

    def show(self: Any, title: str | None = None) -> None:
        display(self)

    def saved(self: Any, fp: Any, format: str | None = None, **params: Any) -> None:
        if isinstance(fp, (str, os.PathLike)):
            display(self)
        save(self, fp, format, **params)

    Image.show, Image.save = show, saved


_hutch_install_formatters()
_hutch_display_images()
del _hutch_install_formatters, _hutch_display_images
