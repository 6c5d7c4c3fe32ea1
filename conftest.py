# Repository root on sys.path so tests import `sim.testbench` and the packages in place.


def pytest_collection_modifyitems(config, items):
    """Slow tests first: with -n 2 the long synthesis runs then overlap the short tests
    instead of leaving one worker alone with them at the end (same order in every worker)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
