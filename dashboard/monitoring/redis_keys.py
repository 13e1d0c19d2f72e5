"""The Redis keys the collectors write and the dashboard reads. Imports nothing: the beat process
loads it while the Celery app is still being built (offsetwatch.celery -> heartbeat)."""

POLL_LOCK_PREFIX = "offsetwatch:poll:"  # + source: held while a poll of the source runs
QUEUED_PREFIX = "offsetwatch:queued:"  # + source: a poll of the source waits in the queue (value: its QUEUED_ORDER_KEY number)
QUEUED_ORDER_KEY = "offsetwatch:queued-order"  # INCR'd per queued mark: the order polls were queued in, on every host
BEAT_SENT_KEY = "offsetwatch:heartbeat:beat-sent"  # unix time beat last sent collect_all
POLLING_KEY = "offsetwatch:polling"  # hash: source -> unix time its running poll started
RECORD_TIMES_PREFIX = "offsetwatch:record-times:"  # + cluster id: JSON of record timestamps read and positions left unread
