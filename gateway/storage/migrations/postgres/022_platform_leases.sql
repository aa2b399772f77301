-- SQLite's 021_platform_leases.sql (see there): who holds each connection that must be single.
CREATE TABLE platform_leases (
    platform TEXT PRIMARY KEY,
    holder   TEXT NOT NULL,
    until    DOUBLE PRECISION NOT NULL
);
