from scaler.protocol import errors


def test_every_error_is_a_scaler_error():
    names = [
        "ProtocolError",
        "DisconnectedError",
        "WorkerDiedError",
        "TaskCancelledError",
        "TaskRejectedError",
        "ObjectNotFoundError",
        "ObjectStorageRefusedError",
        "RemoteTaskError",
    ]
    for name in names:
        error = getattr(errors, name)
        assert issubclass(error, errors.ScalerError) and issubclass(error, Exception), name
