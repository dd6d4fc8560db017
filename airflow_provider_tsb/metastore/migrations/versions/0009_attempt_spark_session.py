"""the Spark Connect session of a job's newest attempt (tsb_job.spark_session)

A job on the Spark Connect engine records its session id when its attempt starts, so the next
attempt can interrupt what a killed client left running on the server (docs/design.md
"Engines").

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 15:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tsb_job', schema=None) as batch_op:
        batch_op.add_column(sa.Column('spark_session', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tsb_job', schema=None) as batch_op:
        batch_op.drop_column('spark_session')
