# Repository root on sys.path so tests import `sim.testbench` and the packages in place.
