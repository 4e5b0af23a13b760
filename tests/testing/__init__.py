"""The shared test harness (kube-scheduler's testing wrappers and framework helpers, Kueue's
pkg/util/testing): everything more than one test module uses lives here, never in a test module, so no
test imports another (tests/unit/layout/test_design_layout.py checks it).

builders (object builders), clock (FakeClock), config (scheduler configuration texts), scheduler
(make_scheduler), designs (configurations quoted from the designs and Volcano), feed (the informer feed
over the in-memory backend), scripted_api (answers of a scripted API client), capacity_card (the
capacity-card engine's fixtures), webhook_server (the webhook served in a thread, AdmissionReviews),
simulate_text and volcano_scenarios (``gpuq simulate`` driven as the CLI), hostile (hostile inputs),
reference_scoring (reference forms of the score kernels), monitoring (the shipped queries), paths.
pytest fixtures live in the conftest.py of the folder that uses them.
"""
