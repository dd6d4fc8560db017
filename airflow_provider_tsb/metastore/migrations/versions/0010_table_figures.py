"""the live-file figures of a WRITTEN barrier (tsb_table_barrier.file_count, size_bytes)

Every barrier commit records the number of live data files and their total size in bytes at
its Delta version; readers and ``tsb check --integrity`` compare them with what the Delta log
gives. Rows written before this revision have none (NULL: nothing to verify
against but the commit's own ``tsb.files`` / ``tsb.bytes`` metadata, when it has them).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 12:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tsb_table_barrier', schema=None) as batch_op:
        batch_op.add_column(sa.Column('file_count', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('size_bytes', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tsb_table_barrier', schema=None) as batch_op:
        batch_op.drop_column('size_bytes')
        batch_op.drop_column('file_count')
