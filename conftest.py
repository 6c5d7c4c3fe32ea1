# Repository root on sys.path so tests import `sim.testbench` and the packages in place.


def pytest_configure(config):
    """Under -n 2, hand tests to workers one at a time: xdist's default first hands each worker
    a quarter of its share in one block, so one worker took every slow test (they come first,
    below) and the suite ran as long as their sum."""
    if config.pluginmanager.hasplugin("xdist") and getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(config, items):
    """Slow tests first: with -n 2 the long synthesis runs then overlap the short tests
    instead of leaving one worker alone with them at the end (same order in every worker)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
