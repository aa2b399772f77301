-- The instance whose turn waits for an approval (several instances on one PostgreSQL database): at start
-- and at stop an instance ends only its own pending requests and those of instances no longer alive.
ALTER TABLE approvals ADD COLUMN instance_id TEXT;
