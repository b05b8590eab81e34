"""A service for the fake's tests: answers its input upper-cased, but for b"raise", b"fatal", b"die" (the process
exits), b"die-once:PATH" (exits if PATH does not exist, creating it) and b"wait:PATH" (until PATH exists)."""

import array
import os
import time

import soamapi


class Payload(soamapi.Message):
    def __init__(self, payload: bytes = b"") -> None:  # no super().__init__(), as some services do
        self.payload = payload

    def on_serialize(self, stream):
        data = array.array("b", self.payload)
        stream.write_byte_array(data, 0, len(data))

    def on_deserialize(self, stream):
        self.payload = stream.read_byte_array("b").tobytes()


class EchoService(soamapi.ServiceContainer):
    def on_invoke(self, task_context):
        message = Payload()
        task_context.populate_task_input(message)
        if message.payload == b"raise":
            raise ValueError("asked to raise")
        if message.payload == b"fatal":
            raise soamapi.FatalException("asked to fail for good")
        if message.payload == b"die":
            os._exit(3)
        kind, _, path = message.payload.decode().partition(":")
        if kind == "die-once" and not os.path.exists(path):
            open(path, "w").close()
            os._exit(3)
        deadline = time.monotonic() + 60
        while kind == "wait" and not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        task_context.set_task_output(Payload(message.payload.upper()))


if __name__ == "__main__":
    EchoService().run()
