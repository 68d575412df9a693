-- v2: Hub memory entries name the apps whose output shaped them
-- Answers written before are left NULL: their provenance is unknown, and
-- readers treat them as shaped by apps (fail closed).
ALTER TABLE hub_memory ADD COLUMN provenance TEXT;
-- A user's message is the user's own words, whenever it was written.
UPDATE hub_memory SET provenance = '' WHERE role = 'user';
