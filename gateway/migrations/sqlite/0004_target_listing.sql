-- Set while a fleet operation's targets are still being listed (SQLite lists
-- them in short transactions after the commit, so that other writes go
-- between). The operation cannot end while it is set, and a gateway that
-- starts with it set finishes the listing.
ALTER TABLE operations ADD COLUMN targets_listing INTEGER NOT NULL DEFAULT 0;
