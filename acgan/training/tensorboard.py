"""TensorBoard event files without TensorFlow: scalars and PNG images, on either backend.

The format is TensorBoard's own (Event protocol buffers in TFRecord framing), written with the
tensorboard package's protos and record writer, the way PyTorch's SummaryWriter does. Writes are
synchronous and rare (every --log_every steps), so a full disk surfaces as an OSError at the write that
failed, which the trainer turns into its one-line disk-full error (TensorFlow's asynchronous writer
drops such errors).
"""

import contextlib
import os
import socket
import time
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from acgan.training import grids
from acgan.util import disk


class SummaryWriter:
    """One event file in `logdir` (created with the folder)."""

    def __init__(self, logdir):
        Path(logdir).mkdir(parents=True, exist_ok=True)
        name = (
            f"events.out.tfevents.{time.time():010.0f}.{socket.gethostname()}.{os.getpid()}.acgan"
        )
        self.path = Path(logdir) / name
        self._file = open(self.path, "wb")
        self._records = RecordWriter(self._file)
        self._write({"file_version": "brain.Event:2"})

    @contextlib.contextmanager
    def _reported(self):
        """A full disk or file-size limit as DiskFull naming the events file (one line, exit status 4)."""
        try:
            yield
        except OSError as e:
            disk.raise_if_full(e, None, self.path)
            raise

    def _write(self, *events):
        """An Event record per dict of Event fields in `events`, stamped with the time now, then one flush:
        readable at once (a metrics read's scalars together)."""
        with self._reported():
            for fields in events:
                self._records.write(
                    event_pb2.Event(wall_time=time.time(), **fields).SerializeToString()
                )
            self._file.flush()

    def scalars(self, values, step):
        self._write(
            *(
                {
                    "step": int(step),
                    "summary": summary_pb2.Summary(
                        value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))]
                    ),
                }
                for tag, value in values.items()
            )
        )

    def image(self, tag, image, step):
        """`image`: a uint8 array [H, W, C] with C 1 or 3, stored as a PNG."""
        picture = summary_pb2.Summary.Image(
            height=image.shape[0],
            width=image.shape[1],
            colorspace=image.shape[-1],
            encoded_image_string=grids.png(grids.grid_picture(image, scale=1)),
        )
        self._write(
            {
                "step": int(step),
                "summary": summary_pb2.Summary(
                    value=[summary_pb2.Summary.Value(tag=tag, image=picture)]
                ),
            }
        )

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if kind is None:
            with self._reported():
                self._file.close()
        else:  # already failing: close without a second error hiding the first
            with contextlib.suppress(Exception):
                self._file.close()
