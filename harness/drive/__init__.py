"""Running scenarios on a device: the loop above the devices it runs on and the results it
reads back.

- `driver.py`: one scenario on one device, in fresh process state, as a `ScenarioResult`;
- `orderings.py`: every ordering of a lifecycle over several modules, run and checked;
- `search.py`: sampled and shrunk explorations when the exhaustive set is too large;
- `solo.py`: a user's program's solo run, the reference when nothing better is known.

The scenarios themselves (what to run) are data in `harness.scenario`; this package is how
they are run, so it may import `harness.devices` and `harness.results`, which never import it.
"""
