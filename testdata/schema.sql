-- Schema shared by every Spanner backend the tests use: the Cloud Spanner
-- emulator and spannertest (which parses it with spansql). Keep to the DDL
-- both accept: no DEFAULT, CHECK, FOREIGN KEY, JSON or NUMERIC columns.
-- Statements are separated by ';'. Loaded by internal/fixture.Schema.

-- Seeded from testdata/seed.sql.
CREATE TABLE Accounts (
  AccountId STRING(36) NOT NULL,
  Region    STRING(32),
  Balance   INT64 NOT NULL
) PRIMARY KEY (AccountId);

-- Written by tests (read-write transactions); empty after seeding.
CREATE TABLE Orders (
  OrderId   STRING(64) NOT NULL,
  AccountId STRING(36) NOT NULL,
  Amount    INT64 NOT NULL,
  Writer    STRING(64)
) PRIMARY KEY (OrderId);

-- Bulk rows for long streaming reads; filled by internal/fixture.FillEvents.
CREATE TABLE Events (
  EventId INT64 NOT NULL,
  Payload STRING(MAX)
) PRIMARY KEY (EventId);

-- Written by the chaos soak (internal/chaos): one row per committed insert. RequestId is the
-- insert's unique ID; RowId is new for every attempt of its transaction, so an insert that
-- committed twice would show as two rows with one RequestId.
CREATE TABLE Inserts (
  RowId     STRING(80) NOT NULL,
  RequestId STRING(64) NOT NULL,
  Writer    STRING(64)
) PRIMARY KEY (RowId);
