"""Billing, pure: what usage costs, invoices, allocation, budgets, forecasts and FOCUS rows.

Like the engine it does no I/O and reads no clock: the service reads usage and prices from the
database and hands them in (see docs/billing.md).
"""
