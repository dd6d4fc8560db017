"""a table's freshness target (tsb_table.freshness_ms, Snowflake TARGET_LAG)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 15:55:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tsb_table', schema=None) as batch_op:
        batch_op.add_column(sa.Column('freshness_ms', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tsb_table', schema=None) as batch_op:
        batch_op.drop_column('freshness_ms')
