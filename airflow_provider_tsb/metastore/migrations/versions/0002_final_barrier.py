"""final barrier: end of a bounded input (FLIP-147)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tsb_barrier', schema=None) as batch_op:
        batch_op.add_column(sa.Column('final', sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('tsb_barrier', schema=None) as batch_op:
        batch_op.drop_column('final')
