-- Seed rows, loaded by internal/fixture.Seed on every backend.
--
-- Only INSERT ... VALUES with literal values (strings, integers, NULL, TRUE,
-- FALSE): fixture.Seed parses these statements with spansql and applies them
-- as InsertOrUpdate mutations, because spannertest runs DML outside its
-- transactions. The file is also valid Spanner DML (for gcloud or the emulator).
INSERT INTO Accounts (AccountId, Region, Balance) VALUES
  ('acct-0001', 'us-east1', 1000),
  ('acct-0002', 'us-east1', 2000),
  ('acct-0003', 'us-central1', 3000),
  ('acct-0004', 'us-central1', 4000),
  ('acct-0005', 'europe-west1', 5000),
  ('acct-0006', 'europe-west1', 6000),
  ('acct-0007', 'asia-east1', 7000),
  ('acct-0008', NULL, 0);
