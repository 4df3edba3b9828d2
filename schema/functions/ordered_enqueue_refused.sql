-- ordered_enqueue_refused aborts the caller's transaction for a batch that the Go client
-- refused before sending it (p_message: its error), so that every refused enqueue aborts the
-- transaction, as the database's own refusals do: what the caller wrote beside the batch
-- cannot commit without it.
CREATE OR REPLACE FUNCTION ordered_enqueue_refused(p_message text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION '%', p_message USING ERRCODE = 'ORD10';
END
$$;
COMMENT ON FUNCTION ordered_enqueue_refused(text) IS
'Internal to ordered: aborts a caller''s transaction for a batch the Go client refused. Not an interface to call, and it may change in any release; producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
