"""The progress bar: tqdm's notebook widget where Jupyter's widgets are installed, its text bar elsewhere.

`tqdm.auto` picks the widget in any Jupyter kernel and, without ipywidgets,
warns "IProgress not found" on import; the text bar works there too.
"""

import importlib.util

if importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm
else:
    from tqdm.std import tqdm

__all__ = ["tqdm"]
