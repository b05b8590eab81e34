from scaler.protocol.messages import Version
from scaler.protocol.version import PROTOCOL_VERSION, incompatibility, show_version


def test_same_major_version_is_compatible_whatever_the_minor():
    assert incompatibility(Version(PROTOCOL_VERSION.major, PROTOCOL_VERSION.minor)) is None
    assert incompatibility(Version(PROTOCOL_VERSION.major, PROTOCOL_VERSION.minor + 7)) is None
    assert incompatibility(Version(3, 0), ours=Version(3, 9)) is None


def test_other_major_version_is_refused_with_both_versions_named():
    reason = incompatibility(Version(2, 5), ours=Version(1, 0))
    assert reason is not None
    assert "2.5" in reason and "1.0" in reason
    assert incompatibility(Version(PROTOCOL_VERSION.major + 1, 0)) is not None
    assert incompatibility(Version(0, 0), ours=Version(1, 0)) is not None


def test_show_version():
    assert show_version(Version(1, 12)) == "1.12"


def test_a_message_added_in_a_minor_version_goes_only_to_peers_that_know_it():
    from scaler.protocol.messages import Version
    from scaler.protocol.version import TASK_OUTPUT_VERSION, knows

    assert knows(Version(1, 3), TASK_OUTPUT_VERSION) and knows(Version(1, 7), TASK_OUTPUT_VERSION)
    assert not knows(Version(1, 2), TASK_OUTPUT_VERSION) and not knows(Version(2, 5), TASK_OUTPUT_VERSION)
