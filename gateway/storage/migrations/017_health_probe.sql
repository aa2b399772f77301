-- The storage's health probe writes here (`gateway.storage.database`): one row, rewritten with the time of
-- each probe. A real write, unlike the empty transaction it replaces, which commits on a full disk.
CREATE TABLE health (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    probed_at  REAL NOT NULL
);
