"""snapshot expiry marks per table; leases pin version ranges

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 13:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'tsb_table_expiry',
        sa.Column('table_id', sa.Integer(), nullable=False),
        sa.Column('horizon', sa.BigInteger(), nullable=False),
        sa.Column('kept', sa.JSON(), nullable=False),
        sa.Column('keep_barriers', sa.Integer(), nullable=False),
        sa.Column('expired_at_ms', sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(['table_id'], ['tsb_table.id'], name=op.f('fk_tsb_table_expiry_table_id_tsb_table')),
        sa.PrimaryKeyConstraint('table_id', name=op.f('pk_tsb_table_expiry')),
    )
    with op.batch_alter_table('tsb_lease_version', schema=None) as batch_op:
        batch_op.add_column(sa.Column('from_version', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tsb_lease_version', schema=None) as batch_op:
        batch_op.drop_column('from_version')
    op.drop_table('tsb_table_expiry')
