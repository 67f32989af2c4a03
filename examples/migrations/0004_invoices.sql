-- What the `totals` example sums (examples/totals): an amount may be NULL (an invoice not
-- priced yet), which the example's unfixed build does not expect.
CREATE TABLE invoices (
    id       BIGINT PRIMARY KEY,
    customer TEXT NOT NULL,
    amount   BIGINT
);
