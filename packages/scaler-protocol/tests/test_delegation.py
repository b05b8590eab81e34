from scaler.protocol import delegation


def test_a_proof_holds_for_its_key_client_and_task_only():
    key, other_key = delegation.new_key(), delegation.new_key()
    client, task = b"C|host|1|aa", bytes(16)
    proof = delegation.proof(key, client, task)
    assert delegation.proven(key, client, task, proof)
    assert not delegation.proven(other_key, client, task, proof)  # another worker's key
    assert not delegation.proven(key, b"C|host|2|bb", task, proof)  # another client presenting it
    assert not delegation.proven(key, client, bytes(15) + b"\1", proof)  # another task
    assert not delegation.proven(key, client, task, b"")
    assert not delegation.proven(b"", client, task, delegation.proof(b"", client, task))  # a worker without a key
