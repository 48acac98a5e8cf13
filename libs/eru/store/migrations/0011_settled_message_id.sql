-- The id (ce-id) of the message a request was dead-lettered with: a replay of that very message is refused, while a
-- client's fresh retry (a new message, the same request id) is planned normally (docs/store.md "Settled requests").
ALTER TABLE settled_requests ADD COLUMN message_id text;
