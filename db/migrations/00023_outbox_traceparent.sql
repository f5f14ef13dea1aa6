-- +goose Up

-- Tracing across the outbox (issue 38): each row keeps the W3C
-- traceparent of the request that wrote it ('' without tracing), so its
-- delivery — by the api-server right after the commit or by any replica's
-- relay later, after a crash or an outage of Temporal — continues that
-- request's trace into the workflow's signal and the turn it wakes.
ALTER TABLE outbox ADD COLUMN traceparent text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE outbox DROP COLUMN traceparent;
