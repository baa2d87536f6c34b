"""The serverless broker: kombu's filesystem transport with its message files written and taken whole.

kombu's own filesystem transport (5.x) creates a message file under its final name and only then
writes it, and a consumer moves the file away and reads it without waiting for the writer. A worker
that polls in between reads an empty file: the job's message is gone, and the JSONDecodeError
escapes kombu's consumer loop and stops the worker (kombu issue #1551; it ended one of our CI runs).
Its consumers also move a taken file to the system temporary folder, which is a copy and a delete
when /tmp is another filesystem, so two workers could both deliver one message.

Here:
- a message is written under a name no consumer lists (`.<name>.part`) and renamed into place
  whole (a rename within one folder is atomic), so a consumer sees all of it or nothing;
- a consumer takes a message by renaming it into the processed folder, which must be on the queue
  folder's filesystem: exactly one rename succeeds, so exactly one worker delivers it;
- a file that still does not parse (cut short by a full disk, or put there by hand) is moved to the
  damaged folder with an error in the log naming it, and the worker goes on to the next message.

The folders come from the broker transport options (facet_site/settings.py); `damaged_folder`
defaults to `damaged` beside the processed folder. facet_site/celery.py registers the transport's
name (`register`) before the Celery app is made. Knows nothing of Django.
"""

from __future__ import annotations

import errno
import logging
import os
import time
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem, virtual
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".part"
ALIAS = "facet-filesystem"  # the transport's name for kombu (register), as worker logs show it


def register() -> None:
    """Make `ALIAS` name this transport for kombu, so CELERY_BROKER_TRANSPORT can say it and the
    worker's banner and logs read `facet-filesystem://localhost//` rather than an import path."""
    TRANSPORT_ALIASES.setdefault(ALIAS, f"{__name__}:Transport")


def message_name(queue: str) -> str:
    """A new message file's name: milliseconds first, so a sorted listing is roughly oldest first
    (CLOCK_MONOTONIC is one clock for every process on the machine), then a uuid, then the queue."""
    return f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"


def remove_stale_partials(folder: str | Path, *, older_than_s: float = 3600) -> list[str]:
    """Hidden partial message files in `folder` older than `older_than_s`: left by a process killed
    while writing one (a write takes milliseconds), never read by any worker. The paths removed."""
    cutoff = time.time() - older_than_s
    removed = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if not (entry.name.startswith(".") and entry.name.endswith(PARTIAL_SUFFIX)):
            continue
        try:
            if entry.stat().st_mtime < cutoff:
                os.remove(entry.path)
                removed.append(entry.path)
        except FileNotFoundError:
            continue  # renamed into place or removed meanwhile
    return removed


class Channel(filesystem.Channel):
    @property
    def damaged_folder(self) -> str:
        return self.transport_options.get("damaged_folder") or os.path.join(
            os.path.dirname(os.path.abspath(self.processed_folder)), "damaged")

    def _put(self, queue, payload, **kwargs):
        """Put `payload` on `queue`: written beside the queue under a name no consumer lists, then
        renamed to its message name."""
        name = message_name(queue)
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{name}{PARTIAL_SUFFIX}")
        try:
            with open(partial, "xb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            try:
                os.remove(partial)
            except OSError:
                pass
            raise ChannelError(f"cannot add message file {final!r} to the broker folder: {exc}") from exc

    def _get(self, queue):
        """The oldest message on `queue` that this worker could take."""
        wanted = f"{queue}.msg"
        taken_folder = self.processed_folder
        for filename in sorted(os.listdir(self.data_folder_in)):
            if filename.partition(".")[2] != wanted:
                continue
            taken = os.path.join(taken_folder, filename)
            try:
                os.rename(os.path.join(self.data_folder_in, filename), taken)
            except FileNotFoundError:
                continue  # another worker took it first
            except OSError as exc:
                # a processed folder on another filesystem (EXDEV) would make every take fail
                hint = " (both must be on one filesystem)" if exc.errno == errno.EXDEV else ""
                raise ChannelError(
                    f"cannot take message file {filename!r} from {self.data_folder_in!r} into "
                    f"{taken_folder!r}{hint}: {exc}") from exc
            try:
                with open(taken, "rb") as f:
                    raw = f.read()
            except OSError as exc:
                raise ChannelError(f"cannot read message file {taken!r}: {exc}") from exc
            try:
                message = loads(bytes_to_str(raw))
                if not isinstance(message, dict):
                    raise ValueError(f"a message is a JSON object, not {type(message).__name__}")
            except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                self._set_aside(taken, filename, len(raw), exc)
                continue
            if not self.store_processed:
                os.remove(taken)
            return message
        raise Empty()

    def _set_aside(self, taken: str, filename: str, size: int, exc: Exception) -> None:
        damaged = os.path.join(self.damaged_folder, filename)
        try:
            os.makedirs(self.damaged_folder, exist_ok=True)
            os.replace(taken, damaged)
        except OSError:
            damaged = taken  # left where it was taken to; the log still names it
        log.error("broker message file %s (%d bytes) is not a message and was set aside as %s: %s",
                  filename, size, damaged, exc)


class Transport(filesystem.Transport):
    """kombu's filesystem transport with the channel above (CELERY_BROKER_TRANSPORT names it by `ALIAS`)."""

    Channel = Channel
    global_state = virtual.BrokerState()
