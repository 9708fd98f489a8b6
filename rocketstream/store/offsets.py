"""Old home of :mod:`rocketstream.store.meta.offsets`, kept (as that very module) while ``rocketstream/spark/`` and
tests that predate the store's folders import it from here. New code imports the new path."""

import sys

from rocketstream.store.meta import offsets as _module

sys.modules[__name__] = _module
